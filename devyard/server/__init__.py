"""The devyard server: control API, edge and store."""
