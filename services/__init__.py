"""The services every layer above uses: the Spark session, the embedded ZooKeeper, the JVM artifact sets, the
quality suites, the report, the alerts, progress lines and the redaction of secrets, and the errors users see.

Nothing here imports the command line (`zkledger/`); the CLI, `engine/`, `kafkalab/` and `jobs/` import from here.
"""
