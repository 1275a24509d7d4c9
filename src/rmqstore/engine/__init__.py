"""Store logic: commitlog, consume queues, index, dispatch, checkpoint, recovery, retention."""
