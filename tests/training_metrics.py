"""The metrics.jsonl an emitted training program writes (lx_metrics.h), as
the tests read it."""
import json
import os


def losses_by_step(metrics):
    """step -> loss; a resumed run appends, its lines come last and win."""
    by_step = {}
    if os.path.exists(metrics):
        with open(metrics) as f:
            for line in f:
                if line.strip():
                    record = json.loads(line)
                    by_step[record["step"]] = record["loss"]
    return by_step
