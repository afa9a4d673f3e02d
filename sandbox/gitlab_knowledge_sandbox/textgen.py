"""Assemble titles, descriptions and note bodies from the vocabulary (deterministic per RNG)."""

import random
from collections.abc import Sequence

from . import vocab
from .vocab import Topic


class TextGen:
    def __init__(self, rng: random.Random, usernames: Sequence[str]) -> None:
        self.rng = rng
        self.usernames = list(usernames)
        # Set per parent, so references point at plausible iids of the same project.
        self.max_issue = 1
        self.max_mr = 1
        self.web = "https://gitlab.example.com/acme/project"
        self.milestones: Sequence[str] = ("v1.0",)

    def fill(self, template: str, topic: Topic) -> str:
        return template.format_map(_Slots(self, topic))

    def pick(self, templates: Sequence[str], topic: Topic) -> str:
        return self.fill(self.rng.choice(templates), topic)

    def issue_title(self, topic: Topic) -> str:
        return self.pick(vocab.ISSUE_TITLES, topic)

    def mr_title(self, topic: Topic) -> str:
        return self.pick(vocab.MR_TITLES, topic)

    def description(self, topic: Topic, paragraphs: Sequence[str], low: int, high: int) -> str:
        count = self.rng.randint(low, high)
        chosen = self.rng.sample(list(paragraphs), min(count, len(paragraphs)))
        return "\n\n".join(self.fill(p, topic) for p in chosen)

    def comment(self, topic: Topic) -> str:
        text = self.pick(vocab.COMMENTS, topic)
        if self.rng.random() < 0.25:
            text += "\n\n" + self.pick(vocab.COMMENTS, topic)
        return text

    def value(self, key: str, topic: Topic) -> str:
        rng = self.rng
        if key == "thing":
            return rng.choice(topic.things)
        if key == "Thing":
            return _cap(rng.choice(topic.things))
        if key in ("symptom", "symptom_short"):
            return rng.choice(topic.symptoms)
        if key == "Symptom":
            return _cap(rng.choice(topic.symptoms))
        if key == "component":
            return topic.component
        if key in ("ident", "ident2"):
            # Now and then an identifier from another topic, as real threads wander.
            source = topic if rng.random() < 0.9 else rng.choice(vocab.TOPICS)
            return rng.choice(source.idents)
        if key == "CONST":
            consts = [i for i in topic.idents if i.isupper()]
            return rng.choice(consts) if consts else "MAX_RETRIES"
        if key == "file":
            return rng.choice(topic.files)
        if key == "env":
            return rng.choice(vocab.ENVIRONMENTS)
        if key == "version":
            return rng.choice(vocab.VERSIONS)
        if key == "issue":
            return str(rng.randint(1, max(1, self.max_issue)))
        if key == "mr":
            return str(rng.randint(1, max(1, self.max_mr)))
        if key == "Error":
            return rng.choice(vocab.ERRORS)
        if key == "hex8":
            return f"{rng.getrandbits(32):08x}"
        if key == "line":
            return str(rng.randint(12, 480))
        if key == "plan":
            return rng.choice(vocab.PLANS)
        if key == "count":
            return str(rng.randint(2, 40))
        if key == "n1":
            return str(rng.randint(400, 2400))
        if key == "n2":
            return str(rng.randint(40, 390))
        if key == "test_cmd":
            return rng.choice(vocab.TEST_CMDS).replace("{ident}", rng.choice(topic.idents))
        if key == "user":
            return rng.choice(self.usernames)
        if key == "milestone":
            return rng.choice(self.milestones)
        if key == "branch":
            return f"{rng.randint(1, max(1, self.max_issue))}-{topic.name}-{rng.choice(topic.things).replace(' ', '-').lower()}"
        if key == "web":
            return self.web
        if key == "date":
            return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        if key == "arg":
            return rng.choice(("None", "0", "''", "user_id=42", "{}", "nil"))
        raise KeyError(key)


class _Slots(dict[str, str]):
    """Placeholders computed on first use (and then reused within one text)."""

    def __init__(self, gen: TextGen, topic: Topic) -> None:
        super().__init__()
        self.gen = gen
        self.topic = topic

    def __missing__(self, key: str) -> str:
        value = self.gen.value(key, self.topic)
        self[key] = value
        return value


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]
