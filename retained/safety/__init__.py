"""What keeps secrets out of the log and takes text back out of it: the write guard, credential detection, erasure."""
