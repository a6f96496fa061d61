"""The loop-agnostic core of cudafd: everything but the event-loop adapters.

Layers, each importing only those below it (tests/test_architecture.py checks):

* errors: the exceptions and the native return codes;
* lib: loading libcudafd.so and choosing the CUDA driver; driver: ctypes
  bindings to that driver; fork: what a fork() child may still do; kernels:
  the demo/test spin kernel; timerfd: the "poll" mechanism's timer fd;
* targets: turning a framework's stream or event into a handle;
* syncfd: a Jetson fence's sync_file (the "syncfd" mechanism);
* backend (the interface), native (the C core's notifier) and poll (the
  pure-Python "poll" mechanism): how GPU progress is learnt;
* policy: how every loop waits (fast path, asking again, order of the waits on
  one stream, poll intervals);
* loop_hook: the slot through which the loop layer (cudafd/_loops/, above)
  installs its entry points, so the core never imports it;
* notifier: Notifier, with the loop-adapter protocol; fence: Fence; stats.

Nothing here imports cudafd._loops.
"""
