"""The engine: wires the pipeline's one composition (``pipelines.keyed_pipeline``) to the lake.

- ``stateful``: the Spark Structured Streaming query (decode and route, one stateful step per key, the sink);
- ``key_processor`` / ``key_steps``: its stateful processor, and what each key runs in it;
- ``stateful_sink``: its ``foreachBatch`` sink (executors write the files, the driver commits them);
- ``rebuild`` / ``monitor``: the query from a fresh checkpoint over all history, or on its checkpoint going on;
- ``local_run``: the same steps and sink run in the driver, for small histories and tests;
- ``upkeep``: what a monitor does besides its batches (quality suites, lake maintenance).
"""
