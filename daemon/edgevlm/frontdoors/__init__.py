"""Front doors: each decodes its transport and hands requests to the pipeline: ``mqtt``
and ``http``."""
