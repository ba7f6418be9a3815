"""Comparison reports: ``contrasuite compare NAME`` runs ``contrasuite.pipelines.reports.NAME.main(argv)``."""
