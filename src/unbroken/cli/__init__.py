"""``unbroken <command>``: demo, capture, inspect, replay, mock, proxy (one module per command)."""
