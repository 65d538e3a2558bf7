"""The MetaService demo (``metaservice-demo``): a streaming pipeline on Spark and Iceberg, kept
consistent, in one command; see :mod:`metaservice_demo.demo`.

An application of the distribution's two packages, outside both: it starts the server as a user
does (``metaservice serve``) and uses only the plugin's public API (``import spark_plugin as
sp``). Neither ``metaservice`` nor ``spark_plugin`` imports it.
"""
