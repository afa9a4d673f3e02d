"""Text analysis shared by indexing and querying, so both sides make the same terms.

Words go through an English analyzer (lowercase + Porter-style stemmer: "searching" finds
"search"). Code identifiers get a field of their own, where each identifier is kept whole and also
split at its joints:

    src/auth/login.ts  → src/auth/login.ts, src, auth, login.ts, login, ts
    AUTH_TOKEN_TTL     → auth_token_ttl, auth, token, ttl
    parseJwtClaims     → parsejwtclaims, parse, jwt, claims
    OrderRepository.find_all → orderrepository.find_all, orderrepository, order, repository,
                               find_all, find, all

so a query for the whole identifier matches it exactly (a rare term, so BM25 ranks it high) and a
query for one of its parts still finds it.
"""

import re

import tantivy

from gitlab_knowledge import kinds

WORD_ANALYZER = "gk_en"
IDENT_ANALYZER = "gk_ident"
MAX_TERM_CHARS = 80

# An identifier-ish token: letters/digits joined by _ . / - : (a path, dotted name, snake_case),
# or a single word with an inner capital (camelCase). Trailing punctuation is not part of it.
_TOKEN = re.compile(r"[A-Za-z0-9_$][A-Za-z0-9_$./:\-]*[A-Za-z0-9_$]|[A-Za-z0-9_$]")
_JOINTS = re.compile(r"[./:\-]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


# Function words carry no topic; in a query they only let long, chatty documents outscore the one
# that is about the query's subject. They are still indexed (a query made only of them works).
STOPWORDS = frozenset("""a about an and any are as at be been but by can could did do does for from had has have how
    i if in into is it its me my of on or our out so than that the their them then there these they this to too
    was we were what when where which while who whom why will with would you your""".split())


def query_terms(analyzer: tantivy.TextAnalyzer, text: str) -> dict[str, int]:
    """The stemmed terms of a query and how often each occurs, in order of first appearance,
    without stopwords unless it has nothing else."""
    words = re.findall(r"\w+", text.lower())
    content = [w for w in words if w not in STOPWORDS] or words
    counts: dict[str, int] = {}
    for word in content:
        for term in analyzer.analyze(word):
            counts[term] = counts.get(term, 0) + 1
    return counts


def query_words(analyzer: tantivy.TextAnalyzer, text: str) -> list[str]:
    """The stemmed terms of a query, once each (see query_terms)."""
    return list(query_terms(analyzer, text))


def word_analyzer() -> tantivy.TextAnalyzer:
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(MAX_TERM_CHARS))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.stemmer("english"))
            .build())


def ident_analyzer() -> tantivy.TextAnalyzer:
    # The terms are produced by identifier_terms(); the index only splits on whitespace.
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
            .filter(tantivy.Filter.remove_long(MAX_TERM_CHARS))
            .filter(tantivy.Filter.lowercase())
            .build())


def _is_identifier(token: str) -> bool:
    return bool(_JOINTS.search(token) or "_" in token or re.search(r"[a-z][A-Z]", token))


def identifier_terms(text: str) -> list[str]:
    """Whole identifiers and their parts (lowercase), in order of appearance, without repeats
    of the same term within one identifier."""
    out: list[str] = []
    for match in _TOKEN.finditer(text or ""):
        token = match.group(0)
        if not _is_identifier(token):
            continue
        terms = [token]
        for segment in _JOINTS.split(token):
            if not segment:
                continue
            terms.append(segment)
            snake = [part for part in segment.split("_") if part]
            if len(snake) > 1:
                terms += snake
            for part in snake:
                camel = _CAMEL.findall(part)
                if len(camel) > 1:
                    terms += camel
        # Dotted file names keep their stem + extension together too (login.ts).
        for piece in token.split("/"):
            if "." in piece and piece != token:
                terms.append(piece)
        seen: set[str] = set()
        for term in terms:
            lowered = term.lower()
            if lowered not in seen and len(lowered) <= MAX_TERM_CHARS:
                seen.add(lowered)
                out.append(lowered)
    return out


# What a query's "exact identifier" is: code, not prose. camelCase (a lowercase start, then an
# inner capital) and PascalCase (two or more Capitalized humps: OrderRepository, XMLHttpRequest),
# snake_case and SCREAMING_CASE, dotted and :: names whose parts start with a letter
# (OrderRepository.find_all, login.ts, Foo::Bar) and paths (src/auth/login.ts, /etc/hosts).
# Not capitalised words or brand names (PostgreSQL has one hump), not hyphenated words
# (0-dimensional, real-time), not version numbers (2.53.1) and not `and/or`.
_CAMEL_CASE = re.compile(r"^[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*$")
_PASCAL_HUMP = re.compile(r"[A-Z][a-z]+")
_SNAKE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+$|^_+[A-Za-z][A-Za-z0-9_]*$")
_DOTTED = re.compile(r"^[A-Za-z_$][\w$]+(?:(?:\.|::)[A-Za-z_$][\w$]+)+$")
_PATH_SEGMENT = re.compile(r"^[\w.\-]+$")


def is_code_identifier(token: str) -> bool:
    """Whether a query token (punctuation around it already stripped) names code exactly."""
    if len(token) < 3 or len(token) > MAX_TERM_CHARS or token.startswith(("http:", "https:")):
        return False
    if _CAMEL_CASE.match(token) or _SNAKE.match(token) or _DOTTED.match(token):
        return True
    if re.fullmatch(r"[A-Za-z0-9]+", token) and re.search(r"[a-z][A-Z]", token):
        return len(_PASCAL_HUMP.findall(token)) >= 2
    if "/" in token:
        segments = [s for s in token.split("/") if s]
        if len(segments) < 2 or not all(_PATH_SEGMENT.match(s) for s in segments):
            return False
        # A path has a file name, a root, or depth: `read/write` and `and/or` are prose.
        extension = re.search(r"\.[A-Za-z]\w*$", segments[-1])
        return token.startswith(("/", "./", "~/")) or bool(extension) or len(segments) >= 3
    return False


def code_identifiers(text: str) -> list[str]:
    """The query's code identifiers as written, lowercased, once each, in order: what an exact
    identifier match pins, and what the identifier field is asked for whole."""
    out: list[str] = []
    for raw in (text or "").split():
        token = raw.strip(".,;:!?()[]{}'\"`<>")
        # The index's identifier terms start at a letter or digit (./src/x.py is src/x.py there).
        term = token.lower().lstrip("./~")
        if is_code_identifier(token) and term not in out:
            out.append(term)
    return out


# GitLab caps a title at 255 characters; a longer key is no title and is neither indexed nor looked up.
MAX_TITLE_KEY_CHARS = 512


def title_key(text: str | None) -> str | None:
    """An issue's or MR's title as a name to look up: its words (letters, digits, `_`), case-folded
    and single-spaced, so punctuation and case do not make another name: "Checkout v2 behind the
    `enable_new_checkout` flag" and "checkout v2 behind the enable_new_checkout flag" are one key.
    None when it has no words (or is longer than any title)."""
    key = " ".join(re.findall(r"\w+", (text or "").casefold()))
    return key if key and len(key) <= MAX_TITLE_KEY_CHARS else None


def references(text: str) -> list[tuple[str | None, str, int]]:
    """`#234`, `!847`, `group/project#12` → (project or None, the kind's name: 'issue'|'merge_request', iid)."""
    return [(ref.project, ref.kind.name, ref.iid) for ref, _start, _end in kinds.find_references(text or "")]
