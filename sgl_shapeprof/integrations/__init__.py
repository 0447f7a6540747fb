"""Integrations with inference servers."""
