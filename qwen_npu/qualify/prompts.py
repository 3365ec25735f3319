"""The built-in prompt set of the answers claim: what users of these checkpoints ask, greedily.

At least 32 prompts over the kinds of output that go wrong first when speculative decoding or a
state layout is off: short and long answers, code, arithmetic, Chinese, JSON, and one long context
(a few thousand tokens, where a corrupted SSM state shows as drift). Each prompt carries its own
answer budget; ``--max-new-tokens`` caps it and ``--prompts N`` takes the first N (tests).
The long context is generated, not stored: a ledger of records and a question about one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

SHORT, LONG, CODE, ARITHMETIC, CHINESE, JSON, LONG_CONTEXT = (
    "short",
    "long",
    "code",
    "arithmetic",
    "chinese",
    "json",
    "long-context",
)


@dataclass(frozen=True)
class Prompt:
    """One prompt: a stable id (named in verdicts), its kind, its text and its answer budget."""

    id: str
    kind: str
    text: str
    max_new_tokens: int


_CITIES = ("Lisbon", "Osaka", "Nairobi", "Quito", "Tallinn", "Hanoi", "Perth", "Dakar")
_ITEMS = ("copper wire", "rice", "bicycle tyres", "tea", "glass panes", "wool", "solar cells")


def ledger(records: int = 240) -> str:
    """A long, varied document (about 20 tokens per record) with one answerable fact per line."""
    lines = []
    for i in range(records):
        city, item = _CITIES[i % len(_CITIES)], _ITEMS[(i * 3) % len(_ITEMS)]
        crates = (i * 37 + 11) % 500 + 20
        lines.append(f"Record {i + 1}: the warehouse in {city} holds {crates} crates of {item}.")
    return "\n".join(lines)


def _long_context() -> str:
    target = 173
    return (
        "Read the ledger below, then answer the question after it.\n\n"
        f"{ledger()}\n\n"
        f"Question: how many crates does Record {target} list, of what, and in which city? "
        "Answer in one sentence."
    )


_P: tuple[tuple[str, str, int], ...] = (
    (SHORT, "The capital of France is", 32),
    (SHORT, "Name three primary colours.", 32),
    (SHORT, "What is the boiling point of water at sea level in degrees Celsius?", 32),
    (SHORT, "Translate 'good morning' into Spanish.", 24),
    (SHORT, "Who wrote the novel 'Pride and Prejudice'?", 32),
    (SHORT, "Give one synonym for 'rapid'.", 16),
    (SHORT, "What is the chemical symbol for gold?", 16),
    (SHORT, "Complete the sentence: The quick brown fox", 32),
    (LONG, "Explain how a transformer language model generates text, step by step.", 256),
    (LONG, "Write a short story about a lighthouse keeper who finds a message in a bottle.", 256),
    (LONG, "Describe the water cycle for a ten-year-old reader.", 200),
    (LONG, "Compare TCP and UDP: when would you choose each, and why?", 256),
    (LONG, "Summarise the causes of the First World War in a few paragraphs.", 256),
    (LONG, "Give a packing list for a week of hiking in the mountains, with reasons.", 200),
    (CODE, "Write a Python function that returns the n-th Fibonacci number iteratively.", 160),
    (
        CODE,
        "Write a SQL query that lists the five customers with the highest total order "
        "value from tables customers(id, name) and orders(customer_id, amount).",
        160,
    ),
    (
        CODE,
        "Write a bash one-liner that counts the lines of every .py file under the current "
        "directory and prints the total.",
        96,
    ),
    (CODE, "Implement binary search in C and explain its complexity.", 200),
    (CODE, "Write a Rust function that reverses the words of a sentence.", 160),
    (ARITHMETIC, "What is 17 multiplied by 23? Show your working.", 96),
    (ARITHMETIC, "A train travels 240 km in 3 hours. What is its average speed in km/h?", 64),
    (ARITHMETIC, "Compute 1234 + 5678 - 910.", 48),
    (
        ARITHMETIC,
        "If a shirt costs 40 dollars and is discounted by 15 percent, what is the new price?",
        64,
    ),
    (ARITHMETIC, "What is the sum of the integers from 1 to 100?", 64),
    (CHINESE, "请用三句话介绍一下长城。", 128),
    (CHINESE, "把下面这句话翻译成英文：今天天气很好，我们去公园散步吧。", 64),
    (CHINESE, "写一首关于秋天的五言绝句。", 64),
    (CHINESE, "解释一下什么是机器学习，并举一个生活中的例子。", 160),
    (
        JSON,
        "Return a JSON object with keys name, age and city for a fictional person. Output "
        "only the JSON.",
        64,
    ),
    (
        JSON,
        'Convert this to JSON: title "Dune", author "Frank Herbert", year 1965, '
        "genres science fiction and adventure.",
        96,
    ),
    (
        JSON,
        "Produce a JSON array of three objects, each with an id (integer) and a colour "
        "(string). Output only the JSON.",
        96,
    ),
    (LONG, "List the planets of the solar system in order from the sun, with one fact each.", 256),
)


def builtin() -> list[Prompt]:
    """The set, in a fixed order (the long context last)."""
    out = [
        Prompt(f"{kind}-{n:02d}", kind, text, budget)
        for n, (kind, text, budget) in enumerate(_P, start=1)
    ]
    out.append(Prompt(f"{LONG_CONTEXT}-{len(out) + 1:02d}", LONG_CONTEXT, _long_context(), 64))
    return out


def select(count: int | None, max_new_tokens: int | None) -> list[Prompt]:
    """The first ``count`` prompts (all when None), each budget capped at ``max_new_tokens``."""
    chosen = builtin()[:count] if count else builtin()
    if max_new_tokens is None:
        return chosen
    return [Prompt(p.id, p.kind, p.text, min(p.max_new_tokens, max_new_tokens)) for p in chosen]
