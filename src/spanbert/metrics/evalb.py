"""Labelled bracketing scores exactly as EVALB computes them with ``COLLINS.prm`` (no torch).

EVALB (Sekine & Collins, 1997; nlp.cs.nyu.edu/evalb) reads a gold file and a test file, one bracketed
tree a line, and scores line k of one against line k of the other. ``COLLINS.prm`` is the parameter
file of the parsing literature (the F1 of the cloze paper's Table 4 and of Kitaev & Klein 2018):

    LABELED 1; CUTOFF_LEN 40; MAX_ERROR 10000
    DELETE_LABEL TOP, -NONE-, ",", ":", "``", "''", "."
    DELETE_LABEL_FOR_LENGTH -NONE-
    EQ_LABEL ADVP PRT

The rules, as evalb.c applies them to one pair of lines:

* **Reading.** ``(LABEL word)`` is a terminal (a preterminal and its word); any other ``(LABEL ...``
  opens a bracket over the terminals read until its ``)``. ``( (S ...))`` reads as a bracket with
  the empty label around the whole sentence, and it *counts* (it is not TOP). A terminal whose tag is
  a DELETE_LABEL (exactly: ``-NONE-``, ``,``, ``:``, ``` `` ```, ``''``, ``.``) is dropped with its word:
  it is neither a word nor inside any bracket's span. Preterminals are never brackets.
* **Length** (for the ``len<=40`` figures) is the gold line's number of terminals whose tag is not a
  DELETE_LABEL_FOR_LENGTH (only ``-NONE-``): punctuation counts towards the length although it is
  deleted from the scoring.
* **Status.** A test line with no words left is a *skip* sentence (status 2). Otherwise gold and test
  must have the same number of words (``Length unmatch``) and the same words in order (``Words
  unmatch``; EQ_WORD pairs would be equal, COLLINS.prm has none), else the sentence is an *error*
  (status 1); a line with unbalanced brackets is an error too. Skip and error sentences add nothing
  to the bracket counts; they are counted in "Number of sentence".
* **Brackets.** A label is cut at its first ``-`` or ``=`` (``NP-SBJ-1`` -> ``NP``, ``PP=2`` -> ``PP``);
  a bracket is deleted when it spans no word (it held only deleted terminals) or its cut label is a
  DELETE_LABEL (``TOP``; ``ROOT`` is *not*, so a ``(ROOT ...)`` wrapper counts as a bracket). The
  remaining gold and test brackets are matched one-to-one on (start, end, label), labels equal or an
  EQ_LABEL pair (ADVP = PRT); repeated brackets count as many times as they occur.
* **Per sentence:** matched, gold and test brackets; complete match when all three are equal (also
  when the sentence has no bracket); crossing: the test brackets that cross at least one gold bracket;
  tagging: terminals whose tags are equal (after deletion, so punctuation is not counted).
* **Summary** ("-- All --" and "-- len<=40 --"): recall = matched / gold brackets, precision =
  matched / test brackets, F = 2PR / (P + R), all x100, summed over the valid sentences (micro
  average); complete match, no crossing, "2 or less crossing" are percentages of valid sentences,
  average crossing is per valid sentence; tagging accuracy over their words.

Where evalb.c gives no figures we say so: a word where its scanner expects a bracket (a word outside
the brackets, ``(A b c)``, or ``(NN word )`` with a space before the ``)``, which evalb.c reads as
"More than two elements") makes it repeat "Reading sentence" until MAX_ERROR stops it with no
summary; here that raises `EvalbAbort` at once. F is 0 when P + R = 0 (evalb prints ``nan``). ``QUOTE_LABEL`` (the 2006 misquote
fix) is not in COLLINS.prm and is not implemented; nor are evalb.c's fixed buffers (a line longer than
5,000 characters, 200 words or 200 brackets overflows them; here it is scored whole). More than MAX_ERROR errors stop evalb without a
summary; here that is `EvalbAbort` too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

OK, ERROR, SKIP = 0, 1, 2
"""Sentence status as evalb prints it in its "Stat." column."""


@dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB parameter file; the defaults are COLLINS.prm's."""

    delete_labels: tuple[str, ...] = ("TOP", "-NONE-", ",", ":", "``", "''", ".")
    """DELETE_LABEL: a terminal with this tag is dropped with its word; a bracket with this label is not scored."""
    delete_labels_for_length: tuple[str, ...] = ("-NONE-",)
    """DELETE_LABEL_FOR_LENGTH: terminals not counted in the sentence length of the cutoff."""
    equivalent_labels: tuple[tuple[str, str], ...] = (("ADVP", "PRT"),)
    """EQ_LABEL pairs (non-directional)."""
    equivalent_words: tuple[tuple[str, str], ...] = ()
    """EQ_WORD pairs (non-directional)."""
    cutoff_len: int = 40
    """CUTOFF_LEN: the second summary covers gold sentences of at most this length."""
    labeled: bool = True
    """LABELED 1: a bracket matches only with an equal (or equivalent) label."""
    max_error: int = 10000
    """MAX_ERROR: evalb stops (no summary) once the errors reported exceed this."""

    def label_equal(self, a: str, b: str) -> bool:
        return a == b or any((a, b) in ((x, y), (y, x)) for x, y in self.equivalent_labels)

    def word_equal(self, a: str, b: str) -> bool:
        return a == b or any((a, b) in ((x, y), (y, x)) for x, y in self.equivalent_words)


COLLINS = EvalbParams()


class EvalbAbort(ValueError):
    """Where evalb.c itself stops without a summary (see the module notes)."""


@dataclass
class Bracketing:
    """One line as evalb reads it: the words and tags kept after deletion, the brackets (start, end,
    raw label) over word positions [start, end), the sentence length of the cutoff, read errors."""

    words: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    brackets: list[tuple[int, int, str]] = field(default_factory=list)
    length: int = 0
    errors: list[str] = field(default_factory=list)


def _is_terminator(c: str) -> bool:
    return c.isspace() or c in "()"


def read_bracketing(line: str, params: EvalbParams = COLLINS) -> Bracketing:
    """Read one line as evalb.c's ``read_line`` does (a character scanner, not a tree parser: its
    quirks are EVALB's, e.g. ``(NN word )`` with a space before ``)`` stops it, `EvalbAbort`)."""
    out = Bracketing()
    stack: list[int] = []
    p, n = 0, len(line)
    while p < n:
        c = line[p]
        if c.isspace():
            p += 1
        elif c == "(":
            p += 1
            start = p
            while p < n and not _is_terminator(line[p]):
                p += 1
            label = line[start:p]
            if p < n and line[p].isspace():  # a terminal is "(label word)"
                q = p
                while q < n and line[q].isspace():
                    q += 1
                w0 = q
                while q < n and not _is_terminator(line[q]):
                    q += 1
                word = line[w0:q]
                if q < n and line[q] == ")":
                    if label not in params.delete_labels_for_length:
                        out.length += 1
                    if label not in params.delete_labels:
                        out.words.append(word)
                        out.tags.append(label)
                    p = q + 1
                    continue
                if q >= n or line[q] != "(":
                    out.errors.append("More than two elements in a bracket")
            out.brackets.append((len(out.words), -1, label))
            stack.append(len(out.brackets) - 1)
        elif c == ")":
            if not stack:
                out.errors.append("Bracketing unbalance (too many close bracket)")
            else:
                b = stack.pop()
                s, _, label = out.brackets[b]
                out.brackets[b] = (s, len(out.words), label)
            p += 1
        else:
            # evalb.c reports "Reading sentence" without moving on, so it repeats the error until
            # MAX_ERROR ends the program: there is no EVALB result to reproduce
            raise EvalbAbort(f"found {line[p : p + 20]!r} outside any bracket: evalb stops on it (Reading sentence)")
    if stack:
        out.errors.append("Bracketing is unbalanced (too many open bracket)")
        for b in stack:  # never closed: evalb leaves their end at -1, so they match nothing
            s, _, label = out.brackets[b]
            out.brackets[b] = (s, -1, label)
    return out


def cut_label(label: str) -> str:
    """evalb's ``modify_label``: the label up to its first ``-`` or ``=`` (function tags, indices)."""
    for i, c in enumerate(label):
        if c in "-=":
            return label[:i]
    return label


def scored_brackets(b: Bracketing, params: EvalbParams = COLLINS) -> list[tuple[int, int, str]]:
    """The brackets evalb scores: cut labels, without empty spans and DELETE_LABEL labels."""
    out = []
    for s, e, label in b.brackets:
        if s == e:  # "zero element": only deleted terminals inside
            continue
        label = cut_label(label)
        if any(params.label_equal(label, d) for d in params.delete_labels):
            continue
        out.append((s, e, label))
    return out


@dataclass
class SentenceResult:
    """One row of evalb's per-sentence table."""

    id: int
    """1-based line number."""
    length: int
    """The gold sentence's length for the cutoff."""
    status: int
    """OK (0), ERROR (1) or SKIP (2)."""
    matched: int = 0
    gold: int = 0
    test: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0
    reasons: list[str] = field(default_factory=list)
    """evalb's error messages for this line."""

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test else 0.0


def score_sentence(gold_line: str, test_line: str, params: EvalbParams = COLLINS, id: int = 1) -> SentenceResult:
    """evalb's ``calc_result`` for one pair of lines."""
    gold, test = read_bracketing(gold_line, params), read_bracketing(test_line, params)
    result = SentenceResult(id, gold.length, OK, reasons=gold.errors + test.errors)
    if result.reasons:
        result.status = ERROR  # reported, and the sentence's counts are then not added to the totals
    if not test.words:
        result.status = SKIP
        return result
    if len(gold.words) != len(test.words):
        result.status = ERROR
        result.reasons.append(f"Length unmatch ({len(gold.words)}|{len(test.words)})")
        return result
    for g, t in zip(gold.words, test.words):
        if not params.word_equal(g, t):
            result.status = ERROR
            result.reasons.append(f"Words unmatch ({g}|{t})")
            return result
    gb, tb = scored_brackets(gold, params), scored_brackets(test, params)
    used = [False] * len(tb)
    matched = 0
    for s, e, label in gb:
        for j, (ts, te, tlabel) in enumerate(tb):
            if not used[j] and (s, e) == (ts, te) and (not params.labeled or params.label_equal(label, tlabel)):
                used[j] = True
                matched += 1
                break
    # crossing is counted over the test brackets (Collins): each crossing at least one gold bracket
    crossing = sum(any((gs < ts < ge < te) or (ts < gs < te < ge) for gs, ge, _ in gb) for ts, te, _ in tb)
    correct = sum(params.label_equal(g, t) for g, t in zip(gold.tags, test.tags))
    result.matched, result.gold, result.test = matched, len(gb), len(tb)
    result.crossing, result.words, result.correct_tags = crossing, len(gold.words), correct
    return result


@dataclass
class Totals:
    """evalb's TOTAL_* (or TOT40_*) counters."""

    sentences: int = 0
    error_sentences: int = 0
    skip_sentences: int = 0
    gold: int = 0
    test: int = 0
    matched: int = 0
    complete: int = 0
    words: int = 0
    crossing: int = 0
    no_crossing: int = 0
    two_or_less_crossing: int = 0
    correct_tags: int = 0

    def add(self, r: SentenceResult) -> None:
        self.sentences += 1
        if r.status == ERROR:
            self.error_sentences += 1
        elif r.status == SKIP:
            self.skip_sentences += 1
        else:
            self.gold += r.gold
            self.test += r.test
            self.matched += r.matched
            self.complete += r.gold == r.test == r.matched
            self.words += r.words
            self.crossing += r.crossing
            self.no_crossing += r.crossing == 0
            self.two_or_less_crossing += r.crossing <= 2
            self.correct_tags += r.correct_tags

    def summary(self) -> dict[str, float | int]:
        """The numbers of one "=== Summary ===" block, percentages on evalb's 0-100 scale."""
        valid = self.sentences - self.error_sentences - self.skip_sentences
        r = 100.0 * self.matched / self.gold if self.gold > 0 else 0.0
        p = 100.0 * self.matched / self.test if self.test > 0 else 0.0
        return {
            "sentences": self.sentences,
            "error_sentences": self.error_sentences,
            "skip_sentences": self.skip_sentences,
            "valid_sentences": valid,
            "recall": r,
            "precision": p,
            "f1": 2 * p * r / (p + r) if p + r > 0 else 0.0,  # evalb: nan
            "complete_match": 100.0 * self.complete / valid if valid > 0 else 0.0,
            "average_crossing": self.crossing / valid if valid > 0 else 0.0,
            "no_crossing": 100.0 * self.no_crossing / valid if valid > 0 else 0.0,
            "two_or_less_crossing": 100.0 * self.two_or_less_crossing / valid if valid > 0 else 0.0,
            "tagging_accuracy": 100.0 * self.correct_tags / self.words if self.words > 0 else 0.0,
            "matched_brackets": self.matched,
            "gold_brackets": self.gold,
            "test_brackets": self.test,
            "words": self.words,
            "correct_tags": self.correct_tags,
        }


@dataclass
class EvalbResult:
    sentences: list[SentenceResult]
    all: dict[str, float | int]
    """The "-- All --" summary."""
    cutoff: dict[str, float | int]
    """The "-- len<=CUTOFF_LEN --" summary."""
    cutoff_len: int

    def metrics(self) -> dict[str, float | int]:
        """Flat: the All figures, and the cutoff ones prefixed ``len<=40_``."""
        return {**self.all, **{f"len<={self.cutoff_len}_{k}": v for k, v in self.cutoff.items()}}


def evalb(gold_lines: Sequence[str], test_lines: Sequence[str], params: EvalbParams = COLLINS) -> EvalbResult:
    """Score test lines against gold lines, pair by pair, as ``evalb -p COLLINS.prm gold test``.

    Both sequences must have the same length (evalb stops at the shorter file with "Number of lines
    unmatch"; callers check this and name the file)."""
    if len(gold_lines) != len(test_lines):
        raise ValueError(f"{len(test_lines)} test lines for {len(gold_lines)} gold lines; expected as many")
    total, cut = Totals(), Totals()
    results = []
    errors = 0
    for k, (g, t) in enumerate(zip(gold_lines, test_lines), 1):
        r = score_sentence(g.rstrip("\n"), t.rstrip("\n"), params, id=k)
        for reason in r.reasons:  # evalb.c's Error(): exit(1) once the count before this one exceeds MAX_ERROR
            if errors > params.max_error:
                raise EvalbAbort(f"line {k}: more than MAX_ERROR={params.max_error} errors; evalb stops ({reason})")
            errors += 1
        results.append(r)
        total.add(r)
        if r.length <= params.cutoff_len:
            cut.add(r)
    return EvalbResult(results, total.summary(), cut.summary(), params.cutoff_len)


def summary_text(result: EvalbResult) -> str:
    """The "=== Summary ===" block evalb prints (same labels and %6.2f figures)."""
    lines = ["=== Summary ==="]
    for title, s in (("All", result.all), (f"len<={result.cutoff_len}", result.cutoff)):
        lines += [
            "",
            f"-- {title} --",
            f"Number of sentence        = {s['sentences']:6d}",
            f"Number of Error sentence  = {s['error_sentences']:6d}",
            f"Number of Skip  sentence  = {s['skip_sentences']:6d}",
            f"Number of Valid sentence  = {s['valid_sentences']:6d}",
            f"Bracketing Recall         = {s['recall']:6.2f}",
            f"Bracketing Precision      = {s['precision']:6.2f}",
            f"Bracketing FMeasure       = {s['f1']:6.2f}",
            f"Complete match            = {s['complete_match']:6.2f}",
            f"Average crossing          = {s['average_crossing']:6.2f}",
            f"No crossing               = {s['no_crossing']:6.2f}",
            f"2 or less crossing        = {s['two_or_less_crossing']:6.2f}",
            f"Tagging accuracy          = {s['tagging_accuracy']:6.2f}",
        ]
    return "\n".join(lines) + "\n"


def evalb_lines(text: str | Iterable[str]) -> list[str]:
    """Lines of a file as evalb's ``fgets`` loop sees them (a final newline ends the last line)."""
    if isinstance(text, str):
        return text.splitlines()
    return [line.rstrip("\n") for line in text]
