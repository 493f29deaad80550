"""Stages 2-4 and the core: candidate generation (`candidates`: RRF over the channels), ranking
(`features`, `cross_encoder`, `learned`, `ranker`), the slate builder (`slate`) and `Memory`
(`memory`), which reads as the four stages. `eval/` measures them on benchmark data and trains
the ranker; `models/` holds the shipped ranker files."""
