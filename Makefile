# zkledger: every target installs what it needs from nothing (venv, pinned packages, Java check).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LAKE ?= ./lake

.PHONY: help venv java maven jars browser prometheus packages test test-fast lint demo demo-kafka demo-kraft demo-migration bench dist clean zk-start zk-status zk-stop

help:
	@echo "make demo   run the end-to-end story on an embedded ZooKeeper and print the anomalies"
	@echo "make demo-kafka   a controller failover and a zombie attempt on real Kafka 3.9 brokers"
	@echo "make demo-kraft   a controller failover (kill -9), an offline partition and an unclean election on real Kafka 4.1 KRaft nodes"
	@echo "make demo-migration   a ZooKeeper -> KRaft migration of real Kafka 3.9 brokers, an out-of-band ZooKeeper write, and the verdict on finalizing"
	@echo "make test   install from nothing, lint, and run the whole test suite"
	@echo "make test-fast   the tests that need no JVM (no Spark, ZooKeeper, Kafka): the venv only, under 3 minutes"
	@echo "make bench  run the benchmarks (prints ratios against in-run baselines)"
	@echo "make dist   build the wheel dist/zkledger-<version>-py3-none-any.whl, dist/zkledger.zip (spark-submit --py-files) and dist/jars/ (Delta's connector, --jars)"
	@echo "make packages   install every missing Debian package the whole suite runs (Java, chromium, prometheus, Maven once), in one apt-get"
	@echo "make jars   install the pinned JVM artifacts (Delta's connector, Kafka brokers) into .jvm/ (Maven, once)"
	@echo "make zk-start|zk-status|zk-stop   the embedded ZooKeeper (data in \$$LAKE/_zookeeper; ZK_PORT=2181 to pin the port)"

$(STAMP): pyproject.toml requirements.lock
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

# How each Debian package the suite runs is found: its own target below and `packages` both ask these.
JAVA_MAJOR = $$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
HAS_JAVA = v=$(JAVA_MAJOR); [ -n "$$v" ] && [ "$$v" -ge 17 ]
HAS_MAVEN = command -v mvn >/dev/null 2>&1
HAS_CHROMIUM = command -v chromium >/dev/null 2>&1
HAS_PROMETHEUS = command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1

java:
	@if ! { $(HAS_JAVA); }; then \
	  echo "Java 17+ not found (found: $${v:-none}); installing Debian's openjdk-17-jre-headless"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; } \
	  || { echo "error: Java 17+ is required for Spark and ZooKeeper; install it with: apt-get install -y openjdk-17-jre-headless"; exit 1; }; fi

maven:
	@$(HAS_MAVEN) || { \
	  echo "installing Debian's maven to fetch the pinned JVM artifacts (once)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null; } \
	  || { echo "error: Maven is required once to fetch the JVM artifacts; install it with: apt-get install -y maven"; exit 1; }; }

# Every pinned JVM artifact set (jvm/<name>/pom.xml + sha256sums: Delta's Spark connector, Kafka brokers)
# into .jvm/<name>/. A set already installed is not fetched again: after the first run this is offline.
JVM_SETS := $(patsubst jvm/%/pom.xml,%,$(wildcard jvm/*/pom.xml))
JVM_STAMPS := $(foreach s,$(JVM_SETS),.jvm/$(s)/.installed)

jars: $(JVM_STAMPS)

# JVM_TOOLS_FIRST: a target that must finish before any set is fetched (`make test`: packages, which brings Maven)
.jvm/%/.installed: jvm/%/pom.xml jvm/%/sha256sums | $(JVM_TOOLS_FIRST)
	@$(MAKE) -s maven
	jvm/install.sh $*

# The report test renders the HTML in a real headless Chromium (Debian's package).
browser:
	@$(HAS_CHROMIUM) || { \
	  echo "installing Debian's chromium for the report test"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || { echo "error: chromium is required for the report test; install it with: apt-get install -y chromium"; exit 1; }; }

# The ops tests run the shipped alert rules in a real Prometheus server (and promtool), Debian's package.
prometheus:
	@{ $(HAS_PROMETHEUS); } || { \
	  echo "installing Debian's prometheus for the ops tests"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } \
	  || { echo "error: prometheus is required for the ops tests; install it with: apt-get install -y prometheus"; exit 1; }; }

# Every Debian package the whole suite runs that is missing (Java 17+, chromium, prometheus, and Maven while a JVM
# artifact set is not installed yet), in one apt-get: apt holds one lock at a time, and each update is a round trip.
packages:
	@need=""; { $(HAS_JAVA); } || need="$$need openjdk-17-jre-headless"; \
	$(HAS_CHROMIUM) || need="$$need chromium"; \
	lean=""; { $(HAS_PROMETHEUS); } || lean="prometheus"; \
	$(if $(filter-out $(wildcard $(JVM_STAMPS)),$(JVM_STAMPS)),$(HAS_MAVEN) || need="$$need maven";) \
	[ -z "$$need$$lean" ] && exit 0; \
	echo "installing Debian's$$need $$lean"; \
	{ apt-get update -qq \
	  && { [ -z "$$need" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need >/dev/null; } \
	  && { [ -z "$$lean" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$lean >/dev/null; }; } \
	|| { echo "error: could not install$$need $$lean; install them with apt-get install -y$$need $$lean"; exit 1; }

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Four pytest workers (pytest-xdist) on two cores, one test file each at a time (the files of tests/e2e/ together:
# they share one costly session fixture, tests/conftest.py SHARED_WORK_UNITS): the real-cluster tests spend
# most of their time waiting on brokers, sessions, triggers and JVM starts (a whole run keeps the two cores about
# a third busy with two workers), so more workers than cores keep them busy; module
# fixtures (a Kafka cluster, a scenario's runs) are built once; the 15 slowest tests are listed at the end.
# TEST_WORKERS=0 runs the suite in the calling process.
TEST_WORKERS ?= 4
# Spark waits a fixed 10 s for a Python worker it starts to connect back (PythonWorkerFactory); with four workers'
# JVMs and brokers on two cores that wait can run out. A test that fails with that error alone runs up to twice more,
# 20 s later each time (the load that starved the worker has usually passed).
SPARK_SPAWN_RERUN := --reruns 2 --reruns-delay 20 --only-rerun "Python worker failed to connect back"
# A class-data-sharing archive of the classes the tests' Spark drivers load (tests/spark_cds.py), built beside
# lint: the suite's many short-lived Spark JVMs map them instead of loading and verifying them again. Without it
# (a failed build warns) they run as before.
SPARK_CDS := .jvm/spark-cds/driver.jsa
$(SPARK_CDS): $(STAMP) .jvm/delta/.installed
	$(PY) -m tests.spark_cds $@ || echo "warning: no class-data archive for the tests' Spark drivers; they run without it"

# One per Kafka line the labs start dozens of JVMs of (kafkalab/class_archive.py), built beside lint too: a broker
# or node maps its line's classes from it (a 3.9 broker started on 2.4 CPU-seconds instead of 4.0).
KAFKA_CDS := $(foreach l,4.1 3.9,.jvm/kafka-$(l)/classes.jsa)
.jvm/kafka-%/classes.jsa: $(STAMP) .jvm/kafka-%/.installed
	$(PY) -m kafkalab.class_archive $* || echo "warning: no class-data archive for Kafka $*; its JVMs run without it"

# One make of two jobs installs and prepares: pip's install beside apt's and Maven's downloads, lint beside the JVM
# artifacts, the class-data archives last (they need both).
test:
	$(MAKE) --no-print-directory -j2 JVM_TOOLS_FIRST=packages $(SPARK_CDS) lint $(KAFKA_CDS) jars
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=15 \
		$(SPARK_SPAWN_RERUN) tests

# The tests with none of the JVM markers (set from the fixtures a test uses, tests/conftest.py): no Java, jars
# or lint. The two report tests still need chromium (`make browser`). Spread test by test (no --dist
# loadfile): no file here builds an expensive module fixture.
FAST_MARKERS := not spark and not zookeeper and not kafka and not cluster and not prometheus and not benchmark
test-fast: venv
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --durations=10 -m "$(FAST_MARKERS)" tests

demo: venv java jars
	$(VENV)/bin/zkledger --lake $(LAKE) demo

# The same story on real Kafka 3.9 brokers (kafkalab): a controller failover and a zombie attempt, then the
# anomalies, how zkledger's history compares with what Kafka reported, and the report. About 3 minutes.
demo-kafka: venv java jars
	rm -rf $(LAKE)/kafka-demo
	$(VENV)/bin/zkledger --lake $(LAKE)/kafka-demo kafka-lab run create controller-failover zombie-controller

# The story on a real Kafka 4.1 KRaft cluster (three combined nodes, kafkalab): topics created, kill -9 of the
# active controller (a new quorum leader), kill -9 of an RF 1 partition's only replica, an unclean election; then
# the anomalies of each scenario and how zkledger's history compares with what Kafka reported. About 4 minutes.
demo-kraft: venv java jars
	rm -rf $(LAKE)/kraft-demo
	$(VENV)/bin/zkledger --lake $(LAKE)/kraft-demo --cluster kraft-demo kafka-lab kraft create controller-failover offline-partition unclean-election

# A ZooKeeper -> KRaft migration of real Kafka 3.9 brokers (kafkalab.migration) with the three collectors on: a
# KRaft controller in migration mode, the brokers rolled into migration mode, dual-write (a topic created, one
# deleted, a partition moved), the brokers rolled to KRaft, then a plain ZooKeeper client's config write behind
# KRaft's back; stopped before finalizing, it prints the phases, divergences, findings and the verdict (not safe to
# finalize) and writes the report with the migration's section. About 2 minutes.
demo-migration: venv java jars
	rm -rf $(LAKE)/migration-demo
	$(VENV)/bin/zkledger --lake $(LAKE)/migration-demo --cluster migration-demo kafka-lab migration

bench: venv java jars
	$(VENV)/bin/python -m benchmarks.run_all

# The wheel (`pip install dist/zkledger-<version>-py3-none-any.whl`) is built with the venv's setuptools, no
# build isolation: offline once setuptools 70.1+ (which builds wheels itself) is in the venv. build/ is removed
# before and after: setuptools would otherwise ship modules deleted since the last build.
dist: venv jars
	rm -rf dist build && mkdir -p dist
	$(PY) -c 'import setuptools.command.bdist_wheel' 2>/dev/null || $(PY) -m pip install -q "setuptools>=70.1"
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist . && rm -rf build
	zip -qr dist/zkledger.zip zkledger services models collectors pipelines engine jobs conf lakehouse simulator kafkalab -x '*__pycache__*'
	mkdir -p dist/jars && cp .jvm/delta/*.jar dist/jars/
	@echo "built $$(ls dist/*.whl) (pip install; JVM artifacts from ZKLEDGER_JVM_DIR), dist/zkledger.zip and dist/jars/ (spark-submit --py-files and --jars \$$(ls dist/jars/*.jar | paste -sd,))"

ZK_PORT ?= 0
zk-start: venv java
	$(VENV)/bin/zkledger --lake $(LAKE) zk start --port $(ZK_PORT)

zk-status: venv
	$(VENV)/bin/zkledger --lake $(LAKE) zk status

zk-stop: venv
	$(VENV)/bin/zkledger --lake $(LAKE) zk stop

clean:
	rm -rf $(VENV) .jvm dist build *.egg-info .mypy_cache .ruff_cache
