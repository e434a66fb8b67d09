"""The pipeline demo behind ``affinity demo``: keyed events through a consumer group, validated.

A generator (a Spark Structured Streaming query writing with ``format("affinity")``, or with
``--no-spark`` a plain :class:`affinity.groups.GroupPublisher`) produces per-account events into a
consumer group; consumer processes (:mod:`affinity.demo.consumer`) process their share and
republish every event to the validator (:mod:`affinity.demo.collector`,
:mod:`affinity.demo.validation`); one consumer is SIGKILLed midway and a new one joins later. The
orchestrator (:mod:`affinity.demo.orchestrator`) shows live progress (:mod:`affinity.demo.progress`)
and writes the summary and chart (:mod:`affinity.demo.report`, :mod:`affinity.demo.chart`).

Nothing is imported here: the modules need the ``demo`` extra (rich, matplotlib), and the child
processes import only what they use.
"""
