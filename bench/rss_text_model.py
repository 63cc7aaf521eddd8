"""Resident memory of the text model alone, as bench/README.md's K-quant RSS table measures it.

``Engine.load(dir, context, kv_type="f16", batch=512)``, a 512-token prefill of random tokens
and 64 decode steps, in this process; prints the RSS after the load and the peak, in MiB, each
without the mmproj's resident pages (llama-bench loads no mmproj; ``engine_common.rss_kib``).
One process per model: ``for t in q4_k_m q5_k_m q6_k iq4_xs; do .venv/bin/python
bench/rss_text_model.py ~/.cache/edgevlm/bench/gguf-$t; done``.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
from engine_common import rss_kib

from edgevlm.engine import Engine
from edgevlm.engine.prompt import PromptInputs

PREFILL, DECODE = 512, 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="a directory with model.gguf and mmproj.gguf")
    # llama-bench's context for its pp512 run is 512; the decode steps below start again at
    # position 0 after a reset, so 512 holds them too
    parser.add_argument("--context", type=int, default=PREFILL,
                        help="the session's context (default: %(default)s, llama-bench's)")
    parser.add_argument("--threads", type=int, default=2, help="(default: %(default)s)")
    args = parser.parse_args()
    engine = Engine.load(args.model_dir, threads=args.threads, context=args.context,
                         kv_type="f16", batch=PREFILL)
    time.sleep(6)  # the prefault thread maps the files' pages
    after_load = rss_kib()
    session = engine.session
    rng = random.Random(1)
    tokens = [rng.randrange(150_000) for _ in range(PREFILL)]
    pos = np.ascontiguousarray(np.broadcast_to(np.arange(PREFILL, dtype=np.int32),
                                               (3, PREFILL)))
    session.reset()
    session.prefill(PromptInputs(np.asarray(tokens, dtype=np.int32), pos,
                                 np.full(PREFILL, -1, dtype=np.int32),
                                 np.zeros((0, session.n_embd), dtype=np.float32), None, 0, 0), 1)
    logits = np.empty(session.n_vocab, dtype=np.float32)
    session.reset()
    for i in range(DECODE):
        session.decode(tokens[i], i, logits)
    end = rss_kib()
    print(json.dumps({"after_load_mib": round((after_load["VmRSS"] - after_load["RssMmproj"])
                                              / 1024),
                      "peak_mib": round((end["VmHWM"] - end["RssMmproj"]) / 1024),
                      "anon_mib": round(end["RssAnon"] / 1024)}))


if __name__ == "__main__":
    main()
