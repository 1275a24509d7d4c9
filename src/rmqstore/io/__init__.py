"""Disk IO: fixed-size memory-mapped segment files and the queues of them."""
