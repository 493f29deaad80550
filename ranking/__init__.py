"""Stages 2-4 and the core: candidate generation (`candidates`: RRF over the channels), ranking
(`features`, `cross_encoder`, `learned`, `ranker`), the slate builder (`slate`) and `Memory`
(`memory`), which reads as the four stages. `eval/` measures them on benchmark data and trains
the ranker; `models/` holds the shipped ranker files."""

import os

# LightGBM's OpenMP threads busy-wait between parallel regions by default, so on a busy machine
# a waiting thread spins on the core the other one needs: a 30-round LambdaRank fit took 42 s
# instead of 2.4 s at load average 12 on 2 cores. libgomp reads this when lightgbm loads, which
# is only ever through this package.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
