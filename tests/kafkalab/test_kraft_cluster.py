"""A real Kafka 4.1 KRaft cluster (kafkalab.kraft), and zkledger's metadata-log decoder checked against Kafka's
own reader of the same files (`DumpLogSegments --cluster-metadata-decoder`).

One module-scoped cluster of three combined nodes plays a short story: topics created (RF 3 and RF 1), a topic
config altered, the quorum leader killed with SIGKILL (fenced, a new leader elected) and restarted (unfenced),
a topic deleted. The killed node's metadata log is then copied while the node is stopped, and every record of
every segment and snapshot is decoded by both readers and compared field by field. About a minute and a half
on two cores.
"""

from __future__ import annotations

import base64
import json
import shutil
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafkalab.kraft import KRAFT_4_1, KRaftCluster, dump_metadata_log, metadata_log_options
from services.jvm import installed_jars

TOPICS: dict[str, dict[str, Any]] = {
    "orders": {"num_partitions": 3, "replication_factor": 3},
    "single": {"num_partitions": 2, "replication_factor": 1},
    "doomed": {"num_partitions": 2, "replication_factor": 3},
}
ALTERED = ("orders", "retention.ms", "3600000")


@dataclass
class Story:
    cluster: KRaftCluster
    first_leader: tuple[int, int]  # (node, epoch) of the quorum leader that was killed
    second_leader: tuple[int, int]
    killed: int
    bystander: int  # neither killed nor leader after the kill: its log holds the whole story
    copies: dict[int, Path]  # node -> its __cluster_metadata-0, copied while the node was stopped
    files: dict[int, list[Path]]  # node -> segments and snapshots of the copy


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory, starts_kraft: None, takes_minutes: None) -> Iterator[Story]:
    base = tmp_path_factory.mktemp("kraft")
    # small segments and frequent snapshots, so that a one-minute story leaves several of each
    options = metadata_log_options(segment_bytes=16 * 1024, segment_ms=10_000, snapshot_bytes=16 * 1024,
                                   snapshot_interval_ms=10_000)
    with KRaftCluster(base / "cluster", overrides=options) as cluster:
        admin = cluster.admin(request_timeout_ms=15_000)
        try:
            admin.create_topics(TOPICS, timeout_ms=15_000)
            wait_topics(cluster, present=set(TOPICS))
            topic, key, value = ALTERED
            from kafka.admin import ConfigResource, ConfigResourceType

            admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={key: value})])
        finally:
            admin.close()

        first = cluster.wait_quorum_leader()
        killed = first[0]
        cluster.kill(killed)
        second = cluster.wait_quorum_leader(other_than=killed, timeout_s=30)
        cluster.wait_fenced(killed, timeout_s=30)
        cluster.start_node(killed)  # waits until it is unfenced again

        admin = cluster.admin(request_timeout_ms=15_000)
        try:
            admin.delete_topics(["doomed"], timeout_ms=15_000)
        finally:
            admin.close()
        wait_topics(cluster, present=set(TOPICS) - {"doomed"}, absent={"doomed"})

        # The killed leader may come back with a tail the others never committed: then the new leader has it
        # download a snapshot and it truncates its whole log. So the bystander's log is the one sure to hold
        # the whole story; the killed node's is compared too (with a fetched snapshot, when that happened).
        bystander = next(n for n in cluster.controller_ids if n not in (killed, second[0]))
        end = log_end_offset(cluster, bystander)
        copies: dict[int, Path] = {}
        for node in (bystander, killed):
            log_dir = cluster.metadata_log_dir(node)

            def covered(d: Path = log_dir) -> bool:
                return (any(snapshot_end(p) >= end for p in d.glob("*.checkpoint"))
                        and len(list(d.glob("*.log"))) >= 2)

            cluster.wait_for(covered, f"a snapshot past offset {end} and two segments on node {node}", 60)
            cluster.stop_node(node)
            copies[node] = base / f"copy-{node}" / log_dir.name
            shutil.copytree(log_dir, copies[node])
            cluster.start_node(node)
        wait_topics(cluster, present=set(TOPICS) - {"doomed"}, absent={"doomed"}, full_isr=True)
        files = {n: cluster.metadata_log_files(n, c) for n, c in copies.items()}
        yield Story(cluster, first, second, killed, bystander, copies, files)


def wait_topics(cluster: KRaftCluster, present: set[str], absent: frozenset[str] | set[str] = frozenset(),
                *, full_isr: bool = False) -> None:
    def ok() -> bool:
        try:
            admin = cluster.admin()
            try:
                described = {t["name"]: t for t in admin.describe_topics()}
            finally:
                admin.close()
        except Exception:  # a broker restarting: ask again
            return False
        parts = [p for t in present if t in described for p in described[t]["partitions"]]
        return (present <= described.keys() and not absent & described.keys()
                and all(p["leader_id"] >= 0 for p in parts)
                and (not full_isr or all(sorted(p["isr_nodes"]) == sorted(p["replica_nodes"]) for p in parts)))

    cluster.wait_for(ok, f"topics {sorted(present)} led{' with full ISRs' * full_isr} and {sorted(absent)} gone",
                     60)


def log_end_offset(cluster: KRaftCluster, node_id: int) -> int:
    admin = cluster.admin()
    try:
        quorum = admin.describe_metadata_quorum()
    finally:
        admin.close()
    voters = quorum["topics"][0]["partitions"][0]["current_voters"]
    return int(next(v["log_end_offset"] for v in voters if v["replica_id"] == node_id))


def snapshot_end(path: Path) -> int:
    return int(path.name.split("-")[0])


# -- (a) the quorum and the cluster work ------------------------------------------------------------------------
def test_the_quorum_elected_a_new_leader_and_serves_the_topics(story: Story) -> None:
    cluster = story.cluster
    assert story.second_leader[0] != story.killed
    assert story.second_leader[1] > story.first_leader[1]
    admin = cluster.admin()
    try:
        quorum = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
        described = {t["name"]: t for t in admin.describe_topics()}
        from kafka.admin import ConfigResource, ConfigResourceType

        topic, _key, value = ALTERED
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        admin.close()
    leader = cluster.quorum_leader()
    assert leader is not None and quorum["leader_id"] == leader[0] and quorum["leader_epoch"] == leader[1]
    assert sorted(v["replica_id"] for v in quorum["current_voters"]) == [1, 2, 3]
    assert "doomed" not in described
    for name in ("orders", "single"):
        parts = described[name]["partitions"]
        assert len(parts) == TOPICS[name]["num_partitions"]
        for p in parts:
            assert len(p["replica_nodes"]) == TOPICS[name]["replication_factor"]
            assert p["leader_id"] in p["replica_nodes"]
            assert sorted(p["isr_nodes"]) == sorted(p["replica_nodes"])  # the restarted node caught up
    assert value in json.dumps(configs, default=str)
    for node in cluster.nodes.values():
        for name in ("server.log", "controller.log"):
            assert (node.log_dir / name).stat().st_size > 0, f"node-{node.node_id}/{name} is empty"


def test_the_metadata_log_tells_the_story(story: Story) -> None:
    """Read with Kafka's own tool: the records the story must have left, in the bystander's log."""
    records = dump_metadata_log(story.files[story.bystander])
    assert not [r for r in records if "error" in r], "DumpLogSegments could not decode some records"
    segments = [r for r in records if r["file"].endswith(".log")]
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in segments:
        by_type.setdefault(r["type"], []).append(r)
    topics = {r["data"]["name"]: r["data"]["topicId"] for r in by_type["TOPIC_RECORD"]}
    assert set(topics) == set(TOPICS)
    assert [r["data"]["topicId"] for r in by_type["REMOVE_TOPIC_RECORD"]] == [topics["doomed"]]
    topic, key, value = ALTERED
    assert any(r["data"] == {"resourceType": 2, "resourceName": topic, "name": key, "value": value}
               for r in by_type["CONFIG_RECORD"])
    # the restart registers the killed node again, with a new incarnation
    incarnations = {r["data"]["incarnationId"] for r in by_type["REGISTER_BROKER_RECORD"]
                    if r["data"]["brokerId"] == story.killed}
    assert len(incarnations) == 2
    fencing = [r["data"] for r in by_type["BROKER_REGISTRATION_CHANGE_RECORD"]
               if r["data"]["brokerId"] == story.killed and "fenced" in r["data"]]
    assert any(d["fenced"] == 1 for d in fencing) and fencing[-1]["fenced"] == -1  # fenced, then unfenced
    leaders = [(r["leader_epoch"], r["data"]["leaderId"]) for r in by_type["LeaderChange"]]
    assert (story.second_leader[1], story.second_leader[0]) in leaders
    snapshots = [r for r in records if r["file"].endswith(".checkpoint")]
    assert {r["type"] for r in snapshots} >= {"SnapshotHeader", "SnapshotFooter", "TOPIC_RECORD"}


# -- (b) zkledger's decoder against Kafka's ---------------------------------------------------------------------
# dump-log names the KRaft control records it decodes like this; the decoder uses ControlRecordType's names
CONTROL_NAMES = {"LeaderChange": "LEADER_CHANGE", "SnapshotHeader": "SNAPSHOT_HEADER",
                 "SnapshotFooter": "SNAPSHOT_FOOTER", "KRaftVersion": "KRAFT_VERSION", "KRaftVoters": "KRAFT_VOTERS"}
# the schema (Kafka's message JSON, read from the pinned jars) of each control record dump-log prints
CONTROL_SCHEMAS = {"LEADER_CHANGE": "LeaderChangeMessage", "SNAPSHOT_HEADER": "SnapshotHeaderRecord",
                   "SNAPSHOT_FOOTER": "SnapshotFooterRecord", "KRAFT_VERSION": "KRaftVersionRecord",
                   "KRAFT_VOTERS": "VotersRecord"}
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID as Kafka prints it


def test_the_decoder_reads_every_record_as_kafka_does(story: Story) -> None:
    from collectors.kraft_log import MetadataLogDir

    files = [f for node in sorted(story.files) for f in story.files[node]]
    for node, copy in story.copies.items():
        log = MetadataLogDir(copy)
        segments, snapshots = log.segments(), log.snapshots()
        assert len(segments) >= 2 and snapshots, f"too little to compare on node {node}: {story.files[node]}"
        assert sorted([*[s.path for s in segments], *[s.path for s in snapshots]]) == sorted(story.files[node])

    kafka = {(r["file"], r["offset"]): r for r in dump_metadata_log(files)}
    ours = decode_all(files)
    schemas = Schemas()
    assert not [r for r in kafka.values() if "error" in r], "DumpLogSegments could not decode some records"
    problems: list[str] = []
    only_kafka, only_ours = kafka.keys() - ours.keys(), ours.keys() - kafka.keys()
    problems += [f"{f}@{o}: only in DumpLogSegments' output" for f, o in sorted(only_kafka)[:10]]
    problems += [f"{f}@{o}: only in the decoder's output" for f, o in sorted(only_ours)[:10]]
    for key in sorted(kafka.keys() & ours.keys()):
        where = f"{Path(key[0]).parent.parent.name}/{Path(key[0]).name}@{key[1]}"
        problems += [f"{where}: {p}" for p in compare(kafka[key], ours[key], schemas)]
    print(f"compared {len(kafka)} records of {len(files)} files; {len(problems)} differences")
    assert not problems, "decoder differs from Kafka's DumpLogSegments:\n" + "\n".join(problems[:60])


def decode_all(files: list[Path]) -> dict[tuple[str, int], dict[str, Any]]:
    """Every record of `files` through zkledger's reader and decoder, in the shape `dump_metadata_log` gives."""
    from collectors.kraft_log import read_batches
    from models.kraft_records import decode_control_record, decode_metadata_record

    out: dict[tuple[str, int], dict[str, Any]] = {}
    for path in files:
        for batch in read_batches(path):
            for rec in batch.records:
                row: dict[str, Any] = {"offset": rec.offset, "timestamp": rec.timestamp,
                                       "batch_base_offset": batch.base_offset,
                                       "leader_epoch": batch.partition_leader_epoch, "is_control": batch.is_control}
                try:
                    if batch.is_control:
                        ctl = decode_control_record(rec.key, rec.value)
                        row.update(type=ctl.record_type.name, version=ctl.version, data=ctl.fields)
                    else:
                        assert rec.value is not None
                        meta = decode_metadata_record(rec.value)
                        row.update(type=meta.record_type.name, version=meta.version, data=meta.fields)
                except Exception as exc:  # every record is compared, so one failure must not hide the rest
                    row["error"] = f"{type(exc).__name__}: {exc}"
                out[(str(path), rec.offset)] = row
    return out


def compare(kafka: dict[str, Any], ours: dict[str, Any], schemas: Schemas) -> list[str]:
    if "error" in ours:
        return [f"{kafka.get('type')}: the decoder failed: {ours['error']}"]
    problems = [f"{name}: Kafka {kafka[name]!r}, decoder {ours[name]!r}"
                for name in ("timestamp", "batch_base_offset", "leader_epoch", "is_control")
                if kafka[name] != ours[name]]
    if kafka["is_control"]:
        # dump-log prints a control record as its name and its message's JSON; the message's own Version field
        # is the version it was written with, which is what ControlRecord.version holds
        kind = CONTROL_NAMES.get(kafka["type"], kafka["type"])
        version = kafka["data"]["version"] if kafka["data"] is not None else None
        schema = schemas.control(kind) if kafka["data"] is not None else None
    else:
        kind, version, schema = kafka["type"], kafka["version"], schemas.metadata(kafka["type"])
    if ours["type"] != kind:
        return [*problems, f"type: Kafka {kind}, decoder {ours['type']}"]
    if version is not None and ours["version"] != version:
        problems.append(f"{kind} version: Kafka {version}, decoder {ours['version']}")
    if schema is None or kafka["data"] is None:  # a control record dump-log names but does not decode
        return problems
    problems += compare_struct(kafka["data"], ours["data"], schema["fields"], int(ours["version"]), schema,
                               f"{kind} v{ours['version']}")
    return problems


def compare_struct(kafka: dict[str, Any], ours: Any, fields: list[dict[str, Any]], version: int,
                   schema: dict[str, Any], where: str) -> list[str]:
    """Field by field, following Kafka's schema of the record; the only normalizations:

    - a tagged field at its default is left out of dump-log's JSON (Kafka's generated JsonConverter writes a
      tagged field only when it differs from its default), so a field the decoder has and dump-log lacks must
      be tagged in this version and hold the schema's default;
    - a `bytes` field is base64 text in dump-log's JSON and Python bytes in the decoder's.
    """
    if not isinstance(ours, dict):
        return [f"{where}: Kafka has a struct, decoder {ours!r}"]
    problems: list[str] = []
    names = set()
    for field in fields:
        if not in_versions(field.get("versions", "0+"), version):
            continue
        name = field["name"][0].lower() + field["name"][1:]
        names.add(name)
        path = f"{where}.{name}"
        tagged = "tag" in field and in_versions(field.get("taggedVersions", "none"), version)
        if name not in kafka:
            if not tagged:
                problems.append(f"{path}: missing from Kafka's JSON (untagged)")
            elif name in ours and ours[name] != tagged_default(field):
                problems.append(f"{path}: Kafka default {tagged_default(field)!r} (left out), decoder {ours[name]!r}")
            continue
        if name not in ours:
            problems.append(f"{path}: Kafka {kafka[name]!r}, missing from the decoder")
            continue
        problems += compare_value(kafka[name], ours[name], field, version, schema, path)
    problems += [f"{where}.{n}: only in the decoder ({ours[n]!r})" for n in sorted(ours.keys() - names)]
    problems += [f"{where}.{n}: only in Kafka's JSON ({kafka[n]!r})" for n in sorted(kafka.keys() - names)]
    return problems


def compare_value(kafka: Any, ours: Any, field: dict[str, Any], version: int, schema: dict[str, Any],
                  path: str) -> list[str]:
    ftype = str(field["type"])
    element = ftype[2:] if ftype.startswith("[]") else None
    if kafka is None or ours is None:
        return [] if kafka is ours else [f"{path}: Kafka {kafka!r}, decoder {ours!r}"]
    if element is not None and not is_scalar(element):
        if not isinstance(ours, list) or len(ours) != len(kafka):
            return [f"{path}: Kafka {len(kafka)} items, decoder {ours!r}"]
        sub = struct_fields(field, element, schema)
        return [p for i, (k, o) in enumerate(zip(kafka, ours, strict=True))
                for p in compare_struct(k, o, sub, version, schema, f"{path}[{i}]")]
    if element is None and not is_scalar(ftype):
        return compare_struct(kafka, ours, struct_fields(field, ftype, schema), version, schema, path)
    if ftype == "bytes":
        ours = base64.b64encode(ours).decode() if isinstance(ours, bytes | bytearray) else ours
    if ours != kafka or (type(ours) is bool) != (type(kafka) is bool):
        return [f"{path}: Kafka {kafka!r}, decoder {ours!r}"]
    return []


SCALARS = {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string", "bytes", "uuid",
           "records"}


def is_scalar(ftype: str) -> bool:
    return ftype in SCALARS


def struct_fields(field: dict[str, Any], type_name: str, schema: dict[str, Any]) -> list[dict[str, Any]]:
    if "fields" in field:
        return list(field["fields"])
    for common in schema.get("commonStructs", []):
        if common["name"] == type_name:
            return list(common["fields"])
    raise KeyError(f"no struct {type_name} in {schema['name']}")


def in_versions(spec: str, version: int) -> bool:
    """Kafka's version ranges: "none", "N+", "N-M", "N"."""
    if spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


def tagged_default(field: dict[str, Any]) -> Any:
    """A field's default as Kafka's generated code sets it: the schema's `default`, else the type's zero."""
    ftype, default = str(field["type"]), field.get("default")
    if default == "null":
        return None
    if ftype.startswith("[]"):
        return []
    if ftype == "bool":
        return default == "true"
    if ftype.startswith(("int", "uint")):
        return int(default, 0) if default else 0
    if ftype == "float64":
        return float(default) if default else 0.0
    if ftype == "uuid":
        return ZERO_UUID
    if ftype == "bytes":
        return b""
    return default or ""


class Schemas:
    """Kafka's message schemas, read from the pinned jars (kafka-metadata: metadata records; kafka-clients:
    the KRaft control records), so the comparison does not lean on the decoder's own tables."""

    def __init__(self) -> None:
        self.by_name: dict[str, dict[str, Any]] = {}
        for jar in installed_jars(KRAFT_4_1.jar_set):
            if not jar.name.startswith(("kafka-metadata-", "kafka-clients-")):
                continue
            with zipfile.ZipFile(jar) as zf:
                for entry in zf.namelist():
                    if entry.startswith(("common/metadata/", "common/message/")) and entry.endswith(".json"):
                        body = json.loads(strip_comments(zf.read(entry).decode()))
                        self.by_name[body["name"]] = body

    def metadata(self, record_type: str) -> dict[str, Any]:
        """TOPIC_RECORD -> TopicRecord, as Kafka's MetadataRecordType names its constants."""
        name = "".join(part.capitalize() for part in record_type.split("_"))
        if name not in self.by_name:
            raise KeyError(f"no schema {name} for {record_type}")
        return self.by_name[name]

    def control(self, kind: str) -> dict[str, Any]:
        return self.by_name[CONTROL_SCHEMAS[kind]]


def strip_comments(text: str) -> str:
    """Kafka's schema files are JSON with // comments."""
    out, in_string, i = [], False, 0
    while i < len(text):
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\":
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif text.startswith("//", i):
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def test_the_copied_nodes_rejoined(story: Story) -> None:
    """The nodes stopped for the copies are back: listening and unfenced."""
    for node in story.copies:
        story.cluster.wait_node(node, timeout_s=60)
    assert story.cluster.unfenced_brokers() == {1, 2, 3}
