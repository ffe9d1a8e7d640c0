"""Streaming plans per store type and the micro-batch writers behind them."""
