"""Generated memory text for the benchmarks: realistic lengths, a quarter Chinese, deterministic per seed."""

from __future__ import annotations

import random

WORDS = ["garden", "tomato", "python", "sqlite", "berlin", "coffee", "running", "sunday", "meeting", "budget",
         "invoice", "travel", "kyoto", "train", "music", "jazz", "piano", "daughter", "school", "dentist", "report",
         "deadline", "release", "server"]
ZH = "用户喜欢周日早上跑步咖啡花园项目预算会议旅行音乐钢琴学校报告发布服务器"


def sentence(rng: random.Random, i: int) -> str:
    if i % 4 == 3:
        return "".join(rng.choice(ZH) for _ in range(rng.randint(12, 30)))
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."


def fill(title: str, size: int, rng: random.Random) -> str:
    out = [f"# {title}\n"]
    n = 0
    while sum(map(len, out)) < size - 200:
        out.append(f"\n## Section {n}\n\n" + "".join(f"- {sentence(rng, j)}\n" for j in range(6)))
        n += 1
    return "".join(out)
