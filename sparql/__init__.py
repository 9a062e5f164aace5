"""The SPARQL dialects: ``compiler`` (one method per store operation), ``virtuoso`` (its
quirks), ``terms`` (IRIs, literals, parameter binding), ``literal_keys`` and ``sexpr``
(S-expressions), ``readonly`` (the raw-query guard), ``ntriples`` (the loader's fast lane)."""
