"""The student's own run, drawn rank by rank along one time axis.

Built from the time stamps of the trace: communication calls are spans (from entering the call
to leaving it), a harness's compute markers (a pipeline stage's forward and backward) are spans,
optimizer steps and saves are instants. A call a rank never left runs to the end of the picture:
for a hang, that is where each rank stopped. Rank 0's epochs (its sampler's passes) and optimizer
steps are numbered above the rows, and a last line says what to look for. Plain data, so a report carries it as JSON and
renders it as text (terminal, feedback) or as an inline SVG (notebook, nbgrader's HTML).
"""

from __future__ import annotations

import html
import textwrap
from dataclasses import asdict, dataclass, field

# kind: (glyph in text, colour in pictures, legend)
KINDS = {
    "forward": ("F", "#4c72b0", "forward"),
    "backward": ("B", "#dd8452", "backward"),
    "send": (">", "#55a868", "sending"),
    "recv": ("<", "#8172b3", "waiting to receive"),
    "collective": ("C", "#c44e52", "in a collective"),
    "join": ("J", "#937860", "joining the group"),
    "step": ("s", "#222222", "optimizer step"),
    "save": ("W", "#da8bc3", "save"),
}
_SENDS, _RECEIVES = ("send", "isend", "batch_isend_irecv"), ("recv", "irecv")
_SPANS = {"forward": "forward_done", "backward": "backward_done"}  # harness markers: start -> end
_INSTANTS = {"optimizer_step": "step", "save": "save", "ddp_forward": "forward"}  # DDP's forward: when it starts
WIDTH = 60  # columns of the text picture
LOOK_FOR_A_HANG = ("Where each row ends is where that rank stopped: the calls they are stuck in wait for each "
                   "other, so the one without a partner on the other rows is the mismatch.")
LOOK_FOR = ("Read it one step (s) at a time: each call on one row should face its partner on the others (a collective "
            "on every rank, a send on one and a receive on another); a row unlike the others at the same step is the "
            "rank to look at.")


@dataclass
class Span:
    start: float  # seconds from the picture's start
    end: float
    kind: str
    label: str
    unfinished: bool = False


@dataclass
class Timeline:
    title: str
    duration: float
    rows: list[list[Span]]  # one per rank
    marks: list[dict] = field(default_factory=list)  # {"t", "kind": "epoch" or "step", "label"}, from rank 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Timeline":
        return cls(d["title"], d["duration"], [[Span(**s) for s in row] for row in d["rows"]], d.get("marks", []))

    def look_for(self) -> str:
        return LOOK_FOR_A_HANG if any(s.unfinished for row in self.rows for s in row) else LOOK_FOR

    def to_text(self) -> str:
        step = self.duration / WIDTH
        lines = [f"{self.title} (one column = {_ms(step)}):"]
        width = len(f"  rank {len(self.rows) - 1}  ")
        for kind in ("epoch", "step"):
            ruler = _ruler([m for m in self.marks if m.get("kind") == kind], step)
            if ruler.strip():
                lines.append(f"  {kind}".ljust(width) + ruler.rstrip())
        for rank, row in enumerate(self.rows):
            cells = [_cell(row, k * step, (k + 1) * step) for k in range(WIDTH)]
            stopped = next((s for s in row if s.unfinished), None)
            lines.append(f"  rank {rank}  ".ljust(width) + "".join(cells)
                         + (f"  stuck in {stopped.label}" if stopped else ""))
        used = {s.kind for row in self.rows for s in row}
        lines.append("  " + "   ".join(f"{KINDS[k][0]} {KINDS[k][2]}" for k in KINDS if k in used)
                     + "   . nothing traced (computing, or idle)")
        lines.append(f"  {self.look_for()}")
        return "\n".join(lines)

    def to_svg(self) -> str:
        left, width, height = 52, 560, 16
        epochs = [m for m in self.marks if m.get("kind") == "epoch"]
        top = 32 if epochs else 18
        scale = width / self.duration if self.duration > 0 else 0
        parts = [f"<text x='0' y='12' font-size='11'>{html.escape(self.title)}, {_ms(self.duration)} in all</text>"]
        for rank, row in enumerate(self.rows):
            y = top + rank * (height + 4)
            parts.append(f"<text x='0' y='{y + 12}' font-size='11'>rank {rank}</text>")
            # one group per row (its place), and one per run of spans of one colour (where a run has several): a
            # page of many reports stays small; the spans keep their order, and so what lies over what
            parts.append(f"<g transform='translate(0 {y})'><rect x='{left}' width='{width}' height='{height}' "
                         "fill='#f3f3f3'/>")
            for run in _runs(row):
                fill = f" fill='{KINDS[run[0].kind][1]}'"
                parts.append(f"<g{fill}>" if len(run) > 1 else "")
                for s in run:
                    x, w = left + s.start * scale, max((s.end - s.start) * scale, 1.5)
                    title = html.escape(f"{s.label}: {_ms(s.start)} to {_ms(s.end)}"
                                        + (", never returned" if s.unfinished else ""))
                    stroke = " stroke='black' stroke-dasharray='3,2'" if s.unfinished else ""
                    parts.append(f"<rect x='{x:.1f}' width='{w:.1f}' height='{height}'{fill if len(run) == 1 else ''}"
                                 f"{stroke}><title>{title}</title></rect>")
                parts.append("</g>" if len(run) > 1 else "")
            parts.append("</g>")
        bottom = top + len(self.rows) * (height + 4) - 4
        for m in epochs:  # a line across the rows where rank 0 began each epoch
            x = left + float(m["t"]) * scale
            parts.append(f"<line x1='{x:.1f}' y1='{top - 10}' x2='{x:.1f}' y2='{bottom}' stroke='#444' "
                         f"stroke-dasharray='2,2'/><text x='{x + 2:.1f}' y='{top - 3}' font-size='10' fill='#444'>"
                         f"epoch {html.escape(str(m['label']))}</text>")
        y = top + len(self.rows) * (height + 4) + 12
        used = [k for k in KINDS if any(s.kind == k for row in self.rows for s in row)]
        x = left
        for k in used:
            parts.append(f"<rect x='{x}' y='{y - 9}' width='10' height='10' fill='{KINDS[k][1]}'/>"
                         f"<text x='{x + 14}' y='{y}' font-size='11'>{KINDS[k][2]}</text>")
            x += 22 + 6 * len(KINDS[k][2])
        for rank, row in enumerate(self.rows):
            stopped = next((s for s in row if s.unfinished), None)
            if stopped is not None:
                y += 15
                parts.append(f"<text x='{left}' y='{y}' font-size='11'>rank {rank} never returned from "
                             f"{html.escape(stopped.label)} (dashed)</text>")
        for line in textwrap.wrap(self.look_for(), 105):
            y += 15
            parts.append(f"<text x='0' y='{y}' font-size='11'>{html.escape(line)}</text>")
        return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{left + width + 10}' height='{y + 6}' "
                f"font-family='sans-serif'>{''.join(parts)}</svg>")


def _runs(row: list[Span]) -> list[list[Span]]:
    """The row's spans in order, cut where the kind changes."""
    runs: list[list[Span]] = []
    for s in row:
        if runs and runs[-1][0].kind == s.kind:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs


def _ruler(marks: list[dict], step: float) -> str:
    """The marks' labels at their columns, each where it fits with a space before the next (so steps thin out
    where they are dense)."""
    line = [" "] * (WIDTH + 8)
    free_from = 0
    for m in sorted(marks, key=lambda m: m["t"]):
        label = str(m.get("label", ""))
        column = min(int(float(m["t"]) / step), WIDTH - 1) if step > 0 else 0
        if column < free_from or column + len(label) > len(line):
            continue
        line[column:column + len(label)] = label
        free_from = column + len(label) + 1
    return "".join(line)


def _cell(row: list[Span], lo: float, hi: float) -> str:
    """The glyph of what filled most of [lo, hi); an instant in it wins; '.' for nothing traced."""
    instant = next((s for s in row if s.start == s.end and lo <= s.start < hi), None)
    if instant is not None:
        return KINDS[instant.kind][0]
    best, covered = ".", 0.0
    for s in row:
        overlap = min(s.end, hi) - max(s.start, lo)
        if overlap > covered:
            best, covered = KINDS[s.kind][0], overlap
    return best if covered >= 0.25 * (hi - lo) else "."


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def of_world(world, title: str, between: tuple[str, str] | None = None) -> Timeline | None:
    """The timeline of one launch: between two harness markers (their last occurrence), or from
    the moment the ranks joined the group to the end. None when nothing was traced."""
    rows = [_spans(r.events, between) for r in world.ranks]
    starts = [s for s in (_start(r.events, between) for r in world.ranks) if s is not None]
    ends = [s.end for row in rows for s in row] + [e["t"] for r in world.ranks for e in _window(r.events, between)]
    if not starts or not any(rows):
        return None
    t0 = min(starts)
    stopped = world.stopped_at if any(s.unfinished for row in rows for s in row) else None
    t1 = max(ends + [t0] + ([stopped] if stopped else []))
    if t1 <= t0:
        return None
    shifted = [[Span(max(s.start - t0, 0), min((t1 if s.unfinished else s.end) - t0, t1 - t0), s.kind, s.label,
                     s.unfinished) for s in row] for row in rows]
    marks = [{**m, "t": m["t"] - t0} for m in _marks(world.ranks[0].events, between) if t0 <= m["t"] <= t1]
    return Timeline(title, t1 - t0, shifted, marks)


def _marks(events: list[dict], between) -> list[dict]:
    """A rank's epochs (each pass over its sampler) and optimizer steps, numbered, at their moments."""
    marks, steps = [], 0
    for e in _window(events, between):
        if e.get("kind") == "sampler_iter":
            epoch = e.get("epoch")
            marks.append({"t": e["t"], "kind": "epoch", "label": str(epoch) if isinstance(epoch, int) else "?"})
        elif e.get("kind") == "optimizer_step":
            steps += 1
            marks.append({"t": e["t"], "kind": "step", "label": str(steps)})
    return marks


def _start(events: list[dict], between) -> float | None:
    if between is not None:
        window = _window(events, between)
        return window[0]["t"] if window else None
    joined = next((e["t"] for e in events if e.get("kind") == "leave" and e.get("call") == "init_process_group"), None)
    return joined if joined is not None else next((e["t"] for e in events if "t" in e), None)


def _window(events: list[dict], between) -> list[dict]:
    """The events between the last pair of markers (the first calls warm the connections up)."""
    timed = [e for e in events if isinstance(e.get("t"), (int, float))]
    if between is None:
        return timed
    starts = [k for k, e in enumerate(timed) if e.get("kind") == between[0]]
    if not starts:
        return []
    window = timed[starts[-1]:]
    end = next((k for k, e in enumerate(window) if e.get("kind") == between[1]), None)
    return window if end is None else window[:end + 1]


def _spans(events: list[dict], between) -> list[Span]:
    window = _window(events, between)
    spans, open_calls, open_marks = [], {}, {}
    for e in window:
        kind, t = e.get("kind"), e["t"]
        if kind == "enter":
            open_calls[(e.get("call"), e.get("n"))] = e
        elif kind == "leave":
            begun = open_calls.pop((e.get("call"), e.get("n")), None)
            if begun is not None and _kind(begun) and not _grader_join(begun):
                spans.append(Span(begun["t"], t, _kind(begun), _label(begun)))
        elif kind in _SPANS:
            open_marks[_SPANS[kind]] = t
        elif kind in open_marks:
            spans.append(Span(open_marks.pop(kind), t, next(k for k, v in _SPANS.items() if v == kind), kind))
        elif kind in _INSTANTS:
            spans.append(Span(t, t, _INSTANTS[kind], kind.replace("ddp_", "DDP ").replace("_", " ")))
    end = window[-1]["t"] if window else 0
    for begun in open_calls.values():
        if _kind(begun):
            spans.append(Span(begun["t"], end, _kind(begun), _label(begun), unfinished=True))
    return sorted(spans, key=lambda s: s.start)


def _kind(event: dict) -> str | None:
    call = event.get("call")
    if call in _SENDS:
        return "send"
    if call in _RECEIVES:
        return "recv"
    if call == "init_process_group":
        return "join"
    return None if call in ("mp.spawn", "DistributedDataParallel") else "collective"


def _grader_join(event: dict) -> bool:
    """The barrier the harness calls right after joining is the grader's, not the student's."""
    return event.get("call") == "barrier" and not event.get("caller")


def _label(event: dict) -> str:
    label = f"wait() for {event['of']}" if event.get("of") else f"{event.get('call')} #{event.get('n')}"
    if event.get("peer") is not None:
        label += f" {'to' if event.get('call') in _SENDS else 'from'} rank {event['peer']}"
    return label
