import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.message.LeaderChangeMessage;
import org.apache.kafka.common.metadata.BrokerRegistrationChangeRecord;
import org.apache.kafka.common.metadata.ConfigRecord;
import org.apache.kafka.common.metadata.FeatureLevelRecord;
import org.apache.kafka.common.metadata.NoOpRecord;
import org.apache.kafka.common.metadata.PartitionChangeRecord;
import org.apache.kafka.common.metadata.PartitionRecord;
import org.apache.kafka.common.metadata.RegisterBrokerRecord;
import org.apache.kafka.common.metadata.RemoveTopicRecord;
import org.apache.kafka.common.metadata.TopicRecord;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.SimpleRecord;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.server.common.ApiMessageAndVersion;

/**
 * Writes a synthetic KRaft metadata log with Kafka's own classes: records serialized by MetadataRecordSerde,
 * batches built by MemoryRecords (magic 2, uncompressed, producer fields -1, the Raft epoch as partition leader
 * epoch, as the quorum controller's batches are), appended to FileRecords segments that roll like Kafka's.
 *
 * Usage: MetadataLogWriter OUT_DIR RECORDS [SEGMENT_BYTES] [SEED]
 * Writes OUT_DIR/__cluster_metadata-0/&lt;20-digit base offset&gt;.log and prints "records batches segments".
 *
 * The mix follows a busy cluster's controller: topic creations (a TopicRecord, its PartitionRecords and some
 * configs in one batch), ISR shrinks and expands, leader elections, broker failures (fencing, then every
 * partition the broker was in), re-registrations and unfencing, config changes, deletions, a NoOpRecord when
 * idle, and now and then a new Raft leader (a LeaderChange control batch).
 */
public final class MetadataLogWriter {
    private static final int BROKERS = 9;
    private static final int MAX_TOPICS = 3000;
    private static final int MAX_BATCH = 300; // records per batch at most (the controller's batches are bounded)
    private static final int[] PARTITION_COUNTS = {1, 1, 3, 3, 6, 6, 12, 24, 50, 100};

    private final Random rng;
    private final File dir;
    private final long segmentBytes;
    private final ObjectSerializationCache cache = new ObjectSerializationCache();
    private final List<SimpleRecord> pending = new ArrayList<>();
    private final List<Topic> topics = new ArrayList<>();
    private final long[] brokerEpoch = new long[BROKERS + 1];
    private final boolean[] fenced = new boolean[BROKERS + 1];
    private FileRecords segment;
    private long nextOffset = 0;
    private long now = 1_760_000_000_000L;
    private int raftEpoch = 0;
    private long batches = 0;
    private int segments = 0;
    private int topicSeq = 0;

    private static final class Topic {
        final Uuid id;
        final String name;
        final int[][] replicas;
        final int[][] isr;
        final int[] leader;
        final int[] leaderEpoch;
        final int[] partitionEpoch;

        Topic(Uuid id, String name, int partitions) {
            this.id = id;
            this.name = name;
            replicas = new int[partitions][];
            isr = new int[partitions][];
            leader = new int[partitions];
            leaderEpoch = new int[partitions];
            partitionEpoch = new int[partitions];
        }
    }

    private MetadataLogWriter(File dir, long segmentBytes, long seed) {
        this.dir = dir;
        this.segmentBytes = segmentBytes;
        this.rng = new Random(seed);
    }

    public static void main(String[] args) throws IOException {
        if (args.length < 2) {
            System.err.println("usage: MetadataLogWriter OUT_DIR RECORDS [SEGMENT_BYTES] [SEED]");
            System.exit(2);
        }
        File dir = new File(args[0], "__cluster_metadata-0");
        if (!dir.isDirectory() && !dir.mkdirs()) {
            throw new IOException("cannot create " + dir);
        }
        long target = Long.parseLong(args[1]);
        long segmentBytes = args.length > 2 ? Long.parseLong(args[2]) : 100L * 1024 * 1024;
        long seed = args.length > 3 ? Long.parseLong(args[3]) : 29L;
        MetadataLogWriter w = new MetadataLogWriter(dir, segmentBytes, seed);
        w.write(target);
        System.out.println(w.nextOffset + " " + w.batches + " " + w.segments);
    }

    private void write(long target) throws IOException {
        leaderChange();
        add(new FeatureLevelRecord().setName("metadata.version").setFeatureLevel((short) 27), (short) 0);
        add(new FeatureLevelRecord().setName("kraft.version").setFeatureLevel((short) 0), (short) 0);
        commit();
        for (int b = 1; b <= BROKERS; b++) {
            register(b);
        }
        for (int b = 1; b <= BROKERS; b++) {
            unfence(b);
        }
        while (nextOffset + pending.size() < target) {
            int roll = rng.nextInt(1000);
            if (roll < 2) {
                leaderChange();
            } else if (roll < 250) {
                add(new NoOpRecord(), (short) 0);
                commit();
            } else if (roll < 390 || topics.size() < 20) {
                createTopic();
            } else if (roll < 700) {
                isrChurn();
            } else if (roll < 800) {
                elect();
            } else if (roll < 830) {
                brokerFailure();
            } else if (roll < 900) {
                configs();
            } else if (roll < 940) {
                deleteTopic();
            } else {
                recoverBroker();
            }
        }
        commit();
        segment.flush();
        segment.close();
    }

    // ------------------------------------------------------------------ events

    private void register(int b) {
        brokerEpoch[b] = nextOffset + pending.size();
        fenced[b] = true;
        RegisterBrokerRecord.BrokerEndpointCollection eps = new RegisterBrokerRecord.BrokerEndpointCollection();
        eps.add(new RegisterBrokerRecord.BrokerEndpoint().setName("PLAINTEXT").setHost("broker-" + b + ".kafka.svc")
            .setPort(9092).setSecurityProtocol((short) 0));
        RegisterBrokerRecord.BrokerFeatureCollection features = new RegisterBrokerRecord.BrokerFeatureCollection();
        features.add(new RegisterBrokerRecord.BrokerFeature().setName("metadata.version")
            .setMinSupportedVersion((short) 7).setMaxSupportedVersion((short) 27));
        features.add(new RegisterBrokerRecord.BrokerFeature().setName("kraft.version")
            .setMinSupportedVersion((short) 0).setMaxSupportedVersion((short) 1));
        add(new RegisterBrokerRecord().setBrokerId(b).setIncarnationId(uuid()).setBrokerEpoch(brokerEpoch[b])
            .setEndPoints(eps).setFeatures(features).setRack("rack-" + (b % 3)).setFenced(true)
            .setLogDirs(List.of(uuid())), (short) 3);
        commit();
    }

    private void unfence(int b) {
        fenced[b] = false;
        add(new BrokerRegistrationChangeRecord().setBrokerId(b).setBrokerEpoch(brokerEpoch[b])
            .setFenced((byte) -1), (short) 2);
        commit();
    }

    private void createTopic() {
        if (topics.size() >= MAX_TOPICS) {
            deleteTopic();
            return;
        }
        int n = PARTITION_COUNTS[rng.nextInt(PARTITION_COUNTS.length)];
        Topic t = new Topic(uuid(), "topic-" + (topicSeq++) + "-events", n);
        topics.add(t);
        add(new TopicRecord().setName(t.name).setTopicId(t.id), (short) 0);
        int[] live = liveBrokers();
        for (int p = 0; p < n; p++) {
            int rf = Math.min(3, live.length);
            int[] reps = new int[rf];
            int start = rng.nextInt(live.length);
            for (int i = 0; i < rf; i++) {
                reps[i] = live[(start + i) % live.length];
            }
            t.replicas[p] = reps;
            t.isr[p] = reps.clone();
            t.leader[p] = reps[0];
            add(new PartitionRecord().setPartitionId(p).setTopicId(t.id).setReplicas(list(reps))
                .setIsr(list(reps)).setLeader(reps[0]).setLeaderEpoch(0).setPartitionEpoch(0)
                .setDirectories(dirs(rf)), (short) 2);
            if (pending.size() >= MAX_BATCH) {
                commit();
            }
        }
        int configs = rng.nextInt(3);
        for (int i = 0; i < configs; i++) {
            add(new ConfigRecord().setResourceType((byte) 2).setResourceName(t.name)
                .setName(i == 0 ? "retention.ms" : "cleanup.policy")
                .setValue(i == 0 ? String.valueOf(3_600_000L * (1 + rng.nextInt(168))) : "compact"), (short) 0);
        }
        commit();
    }

    private void isrChurn() {
        int k = 1 + rng.nextInt(40);
        for (int i = 0; i < k && !topics.isEmpty(); i++) {
            Topic t = topics.get(rng.nextInt(topics.size()));
            int p = rng.nextInt(t.replicas.length);
            int[] isr = t.isr[p];
            int[] next;
            if (isr.length < t.replicas[p].length) { // expand: a follower caught up again
                next = Arrays.copyOf(isr, isr.length + 1);
                for (int r : t.replicas[p]) {
                    if (!contains(isr, r) && !fenced[r]) {
                        next[isr.length] = r;
                        break;
                    }
                }
                if (next[isr.length] == 0) {
                    continue;
                }
            } else if (isr.length > 1) { // shrink: a follower fell behind
                int drop = isr[1 + rng.nextInt(isr.length - 1)];
                next = without(isr, drop);
            } else {
                continue;
            }
            t.isr[p] = next;
            t.partitionEpoch[p]++;
            add(new PartitionChangeRecord().setPartitionId(p).setTopicId(t.id).setIsr(list(next)), (short) 2);
        }
        commit();
    }

    private void elect() {
        int k = 1 + rng.nextInt(100);
        for (int i = 0; i < k && !topics.isEmpty(); i++) {
            Topic t = topics.get(rng.nextInt(topics.size()));
            int p = rng.nextInt(t.replicas.length);
            int[] isr = t.isr[p];
            if (isr.length < 2) {
                continue;
            }
            int newLeader = isr[1];
            int[] rotated = new int[isr.length];
            for (int j = 0; j < isr.length; j++) {
                rotated[j] = isr[(j + 1) % isr.length];
            }
            t.isr[p] = rotated;
            t.leader[p] = newLeader;
            t.leaderEpoch[p]++;
            t.partitionEpoch[p]++;
            add(new PartitionChangeRecord().setPartitionId(p).setTopicId(t.id).setLeader(newLeader), (short) 2);
            if (pending.size() >= MAX_BATCH) {
                commit();
            }
        }
        commit();
    }

    private void brokerFailure() {
        int[] live = liveBrokers();
        if (live.length <= 3) {
            recoverBroker();
            return;
        }
        int b = live[rng.nextInt(live.length)];
        fenced[b] = true;
        add(new BrokerRegistrationChangeRecord().setBrokerId(b).setBrokerEpoch(brokerEpoch[b])
            .setFenced((byte) 1), (short) 2);
        // the fenced broker leaves every ISR, and its leaderships move to the next ISR member
        for (Topic t : topics) {
            for (int p = 0; p < t.replicas.length; p++) {
                if (!contains(t.isr[p], b) || t.isr[p].length < 2) {
                    continue;
                }
                int[] next = without(t.isr[p], b);
                t.isr[p] = next;
                t.partitionEpoch[p]++;
                PartitionChangeRecord rec = new PartitionChangeRecord().setPartitionId(p).setTopicId(t.id)
                    .setIsr(list(next));
                if (t.leader[p] == b) {
                    t.leader[p] = next[0];
                    t.leaderEpoch[p]++;
                    rec.setLeader(next[0]);
                }
                add(rec, (short) 2);
                if (pending.size() >= MAX_BATCH) {
                    commit();
                }
            }
        }
        commit();
    }

    private void recoverBroker() {
        for (int b = 1; b <= BROKERS; b++) {
            if (fenced[b]) {
                register(b);
                unfence(b);
                return;
            }
        }
        configs();
    }

    private void configs() {
        int k = 1 + rng.nextInt(3);
        for (int i = 0; i < k; i++) {
            if (rng.nextBoolean() && !topics.isEmpty()) {
                Topic t = topics.get(rng.nextInt(topics.size()));
                add(new ConfigRecord().setResourceType((byte) 2).setResourceName(t.name).setName("min.insync.replicas")
                    .setValue(String.valueOf(1 + rng.nextInt(2))), (short) 0);
            } else {
                add(new ConfigRecord().setResourceType((byte) 4).setResourceName(String.valueOf(1 + rng.nextInt(BROKERS)))
                    .setName("log.cleaner.threads").setValue(String.valueOf(1 + rng.nextInt(4))), (short) 0);
            }
        }
        commit();
    }

    private void deleteTopic() {
        if (topics.size() < 20) {
            return;
        }
        Topic t = topics.remove(rng.nextInt(topics.size()));
        add(new RemoveTopicRecord().setTopicId(t.id), (short) 0);
        commit();
    }

    // ------------------------------------------------------------------ batches and segments

    private void add(ApiMessage message, short version) {
        ApiMessageAndVersion record = new ApiMessageAndVersion(message, version);
        int size = MetadataRecordSerde.INSTANCE.recordSize(record, cache);
        ByteBuffer buf = ByteBuffer.allocate(size);
        MetadataRecordSerde.INSTANCE.write(record, cache, new ByteBufferAccessor(buf));
        buf.flip();
        pending.add(new SimpleRecord(now, null, buf));
    }

    /** One controller append: the pending records as one batch, timestamped like the Raft client's. */
    private void commit() {
        if (pending.isEmpty()) {
            return;
        }
        MemoryRecords records = MemoryRecords.withRecords(RecordBatch.MAGIC_VALUE_V2, nextOffset, Compression.NONE,
            TimestampType.CREATE_TIME, RecordBatch.NO_PRODUCER_ID, RecordBatch.NO_PRODUCER_EPOCH,
            RecordBatch.NO_SEQUENCE, raftEpoch, false, pending.toArray(new SimpleRecord[0]));
        append(records, pending.size());
        pending.clear();
    }

    private void leaderChange() {
        commit();
        raftEpoch++;
        int leader = 1 + rng.nextInt(3);
        List<LeaderChangeMessage.Voter> voters = new ArrayList<>();
        for (int v = 1; v <= 3; v++) {
            voters.add(new LeaderChangeMessage.Voter().setVoterId(v));
        }
        LeaderChangeMessage msg = new LeaderChangeMessage().setVersion((short) 0).setLeaderId(leader)
            .setVoters(voters).setGrantingVoters(voters.subList(0, 2));
        append(MemoryRecords.withLeaderChangeMessage(nextOffset, now, raftEpoch, ByteBuffer.allocate(256), msg), 1);
    }

    private void append(MemoryRecords records, int count) {
        try {
            if (segment == null || segment.sizeInBytes() + records.sizeInBytes() > segmentBytes) {
                if (segment != null) {
                    segment.flush();
                    segment.close();
                }
                segment = FileRecords.open(new File(dir, String.format("%020d.log", nextOffset)));
                segments++;
            }
            segment.append(records);
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
        nextOffset += count;
        batches++;
        now += 1 + rng.nextInt(400);
    }

    // ------------------------------------------------------------------ helpers

    private Uuid uuid() {
        return new Uuid(rng.nextLong(), rng.nextLong());
    }

    private int[] liveBrokers() {
        int n = 0;
        for (int b = 1; b <= BROKERS; b++) {
            n += fenced[b] ? 0 : 1;
        }
        int[] out = new int[n];
        for (int b = 1, i = 0; b <= BROKERS; b++) {
            if (!fenced[b]) {
                out[i++] = b;
            }
        }
        return out;
    }

    private List<Uuid> dirs(int n) {
        List<Uuid> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            out.add(Uuid.fromString("AAAAAAAAAAAAAAAAAAAAAQ")); // Kafka's DirectoryId.MIGRATING
        }
        return out;
    }

    private static List<Integer> list(int[] values) {
        List<Integer> out = new ArrayList<>(values.length);
        for (int v : values) {
            out.add(v);
        }
        return out;
    }

    private static boolean contains(int[] values, int v) {
        for (int x : values) {
            if (x == v) {
                return true;
            }
        }
        return false;
    }

    private static int[] without(int[] values, int v) {
        int[] out = new int[values.length - 1];
        int i = 0;
        for (int x : values) {
            if (x != v && i < out.length) {
                out[i++] = x;
            }
        }
        return out;
    }
}
