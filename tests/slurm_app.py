"""A tiny Hydra app for checking dots/conf/hydra/launcher/slurm.yaml on a real cluster.

tests/test_slurm_cluster.py runs it as
`python tests/slurm_app.py -m hydra/launcher=slurm x=2,3 ...`: each run writes what it
saw (x, x squared, its SLURM job and array ids) to result.json in its output dir.
"""

import json
import os
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

ConfigStore.instance().store(name="slurm_app", node={"x": 1})


@hydra.main(version_base=None, config_path="../dots/conf", config_name="slurm_app")
def main(cfg: DictConfig) -> int:
    """Record x, x**2 and the SLURM environment of this run; return x**2."""
    record = {
        "x": cfg.x,
        "square": cfg.x**2,
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
        "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
    }
    out = Path(HydraConfig.get().runtime.output_dir) / "result.json"
    out.write_text(json.dumps(record))
    return cfg.x**2


if __name__ == "__main__":
    main()
