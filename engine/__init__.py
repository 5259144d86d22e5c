"""The engine: runs the pipelines' transforms over the lake, as a batch (``rebuild``) or a stream (``monitor``).

- ``increment``: ``run_increment``, one increment from bronze rows to every derived table (the one definition);
- ``rebuild``: all history through it in zxid-ordered chunks (``chunks`` reads them);
- ``monitor``: the Structured Streaming query, one increment per micro-batch; ``monitor_start`` decides
  where it starts, ``carry`` holds the state it continues from;
- ``writes``: an increment's Delta commits, state tables last, each naming its writer.
"""
