"""The fake Transport the unit tests share: it runs nothing, answers each command as the test scripts it, and
records what ran. Fakes of a whole Slurm (health_fakes.FakeSlurm, the bench's clusters) build on it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from hpckit.proc import CommandResult

Reply = tuple[int, str, str]  # exit status, stdout, stderr
Answer = Reply | Callable[[], Reply]


@dataclass(kw_only=True)
class FakeTransport:
    """Answers from `replies`: for each program, a queue of replies (or functions making one) whose last one
    repeats. A program with no replies gets `default`; with no default either, the test fails on a KeyError
    naming it. A subclass answers what it fakes itself in `answer`. `calls` and `stdin` record each command."""

    replies: dict[str, list[Answer]] = field(default_factory=dict)
    default: Reply | None = None
    where: str = "login"
    calls: list[tuple[str, ...]] = field(default_factory=list)
    stdin: list[str | None] = field(default_factory=list)

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        self.stdin.append(stdin)
        return self.answer(args)

    def answer(self, args: tuple[str, ...]) -> CommandResult:
        queue = self.replies.get(args[0])
        if not queue:
            if self.default is None:
                raise KeyError(f"{args[0]}: no reply scripted for {args}")
            return self.result(args, *self.default)
        reply = queue.pop(0) if len(queue) > 1 else queue[0]
        return self.result(args, *(reply() if callable(reply) else reply))

    def result(self, args: tuple[str, ...], rc: int = 0, out: str = "", err: str = "") -> CommandResult:
        return CommandResult(args, rc, out, err, self.where)

    def close(self) -> None:
        """Nothing to close."""


def scripted(replies: Mapping[str, Sequence[Answer]], *, where: str = "login") -> FakeTransport:
    """A FakeTransport answering from `replies` alone."""
    return FakeTransport(replies={name: list(items) for name, items in replies.items()}, where=where)
