"""Work spread over threads, processes and Ray actors (``--concurrency``, ``--workers``, ``--executor``)."""
