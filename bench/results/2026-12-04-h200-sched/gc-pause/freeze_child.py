
import gc, json, sys
from cudafd._bench import lateness
from cudafd._bench.child import Progress
from cudafd._bench.options import QUICK
p = dict(QUICK["lateness"], loop="asyncio", methods=["sleep0"], one_stream=[], streams=[], history=None)
during = []
main = lateness.Run.main
async def counted(self, streams):
    during.append(gc.get_freeze_count())
    await main(self, streams)
lateness.Run.main = counted
out = {}
print("run 1", gc.get_freeze_count(), flush=True)
out["plain"] = lateness.run(p, Progress("t", None, 60))["gc_frozen"], during[-1] > 0, gc.get_freeze_count()
print("run 2", gc.get_freeze_count(), flush=True)
gc.freeze()
kept = gc.get_freeze_count()
out["caller_frozen"] = lateness.run(p, Progress("t", None, 60))["gc_frozen"], during[-1] == kept, gc.get_freeze_count() == kept > 0
gc.unfreeze()
print("run 3", gc.get_freeze_count(), flush=True)
out["off"] = lateness.run(dict(p, gc_freeze=False), Progress("t", None, 60))["gc_frozen"], during[-1], gc.get_freeze_count()
print(json.dumps(out))
