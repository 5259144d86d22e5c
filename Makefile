# zkledger: every target installs what it needs from nothing (venv, pinned packages, Java check).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LAKE ?= ./lake

.PHONY: help venv java maven jars browser test test-fast lint demo demo-kafka bench dist clean zk-start zk-status zk-stop

help:
	@echo "make demo   run the end-to-end story on an embedded ZooKeeper and print the anomalies"
	@echo "make demo-kafka   a controller failover and a zombie attempt on real Kafka 3.9 brokers"
	@echo "make test   install from nothing, lint, and run the whole test suite"
	@echo "make test-fast   the tests that need no JVM (no Spark, ZooKeeper, Kafka): the venv only, under 3 minutes"
	@echo "make bench  run the benchmarks (prints ratios against in-run baselines)"
	@echo "make dist   build dist/zkledger.zip (spark-submit --py-files) and dist/jars/ (Delta's connector, --jars)"
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

java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "Java 17+ not found (found: $${v:-none}); installing Debian's openjdk-17-jre-headless"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; } \
	  || { echo "error: Java 17+ is required for Spark and ZooKeeper; install it with: apt-get install -y openjdk-17-jre-headless"; exit 1; }; fi

maven:
	@command -v mvn >/dev/null 2>&1 || { \
	  echo "installing Debian's maven to fetch the pinned JVM artifacts (once)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null; } \
	  || { echo "error: Maven is required once to fetch the JVM artifacts; install it with: apt-get install -y maven"; exit 1; }; }

# Every pinned JVM artifact set (jvm/<name>/pom.xml + sha256sums: Delta's Spark connector, Kafka brokers)
# into .jvm/<name>/. A set already installed is not fetched again: after the first run this is offline.
JVM_SETS := $(patsubst jvm/%/pom.xml,%,$(wildcard jvm/*/pom.xml))
JVM_STAMPS := $(foreach s,$(JVM_SETS),.jvm/$(s)/.installed)

jars: $(JVM_STAMPS)

.jvm/%/.installed: jvm/%/pom.xml jvm/%/sha256sums
	@$(MAKE) -s maven
	jvm/install.sh $*

# The report test renders the HTML in a real headless Chromium (Debian's package).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the report test"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || { echo "error: chromium is required for the report test; install it with: apt-get install -y chromium"; exit 1; }; }

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Two pytest workers (pytest-xdist), one test file each at a time: module fixtures (a Kafka cluster, a scenario's
# runs) are built once; the 15 slowest tests are listed at the end. TEST_WORKERS=0 runs the suite in the calling
# process.
TEST_WORKERS ?= 2
test: venv java jars browser lint
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=15 tests

# The tests with none of the JVM markers (set from the fixtures a test uses, tests/conftest.py): no Java, jars
# or lint. The two report tests still need chromium (`make browser`). Spread test by test (no --dist
# loadfile): no file here builds an expensive module fixture.
FAST_MARKERS := not spark and not zookeeper and not kafka and not cluster and not benchmark
test-fast: venv
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --durations=10 -m "$(FAST_MARKERS)" tests

demo: venv java jars
	$(VENV)/bin/zkledger --lake $(LAKE) demo

# The same story on real Kafka 3.9 brokers (kafkalab): a controller failover and a zombie attempt, then the
# anomalies, how zkledger's history compares with what Kafka reported, and the report. About 3 minutes.
demo-kafka: venv java jars
	rm -rf $(LAKE)/kafka-demo
	$(VENV)/bin/zkledger --lake $(LAKE)/kafka-demo kafka-lab run create controller-failover zombie-controller

bench: venv java jars
	$(VENV)/bin/python -m benchmarks.run_all

dist: venv jars
	rm -rf dist && mkdir -p dist
	zip -qr dist/zkledger.zip zkledger services models collectors pipelines engine jobs conf lakehouse simulator kafkalab -x '*__pycache__*'
	mkdir -p dist/jars && cp .jvm/delta/*.jar dist/jars/
	@echo "built dist/zkledger.zip and dist/jars/ (Delta's connector: spark-submit --jars \$$(ls dist/jars/*.jar | paste -sd,))"

ZK_PORT ?= 0
zk-start: venv java
	$(VENV)/bin/zkledger --lake $(LAKE) zk start --port $(ZK_PORT)

zk-status: venv
	$(VENV)/bin/zkledger --lake $(LAKE) zk status

zk-stop: venv
	$(VENV)/bin/zkledger --lake $(LAKE) zk stop

clean:
	rm -rf $(VENV) .jvm dist build *.egg-info .mypy_cache .ruff_cache
