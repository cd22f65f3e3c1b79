"""The process plumbing every command shares: glibc's allocator settings (allocator),
SIGTERM as a clean exit (signals), run-once and held-by-one locks (locks), the watcher that
ends an engine's processes with their owner (reaper), progress bars (progress), and environment
variables set for a block (environ)."""
