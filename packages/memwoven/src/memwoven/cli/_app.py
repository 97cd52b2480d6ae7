"""The `memwoven` commands (typer + rich). Exit codes: 0 success, 1 failure (one line on stderr), 2 bad usage,
130 interrupted."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, BinaryIO, NoReturn

import click
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from memwoven.cli._render import (
    human_size,
    item_table,
    items_table,
    messages_table,
    plural,
    search_table,
    sessions_table,
    stdout_console,
)
from memwoven.cli._stores import NAMESPACE_SYNTAX, Failure, Store, parse_namespace, summarize
from memwoven.cli._transfer import Counts, dump_record, export_records, import_records, migrate, plan_migration
from memwoven.contracts import Namespace
from memwoven.embed import EmbedFn, HashingEmbedFn
from memwoven.errors import MemwovenError
from memwoven.models import Message
from memwoven.urls import ITEM_URL_VARIABLE, redact_text

__all__ = ["PLUGIN_GROUP", "add_plugins", "app", "load_plugins", "run"]

app = typer.Typer(
    name="memwoven",
    help="Inspect, export, import and migrate memwoven memory: chat sessions, items and vector collections, by URL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
sessions_app = typer.Typer(help="Chat sessions: list, show, delete.", no_args_is_help=True, rich_markup_mode=None)
vectors_app = typer.Typer(help="Vector collections: stats, search.", no_args_is_help=True, rich_markup_mode=None)
items_app = typer.Typer(
    help=f"Items (JSON objects by namespace and key): list, show. NAMESPACE is {NAMESPACE_SYNTAX}.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(sessions_app, name="sessions")
app.add_typer(items_app, name="items")
app.add_typer(vectors_app, name="vectors")

URL_HELP = (
    "A memwoven URL: sqlite:///file.db, postgresql://user@host/db, mysql://..., redis://host:6379/0, file:///dir, "
    "qdrant://host:6333, qdrant+local:///dir (options: ?table_prefix=... for SQL, ?prefix=... for Redis)"
)
Url = Annotated[str, typer.Argument(metavar="URL", help=URL_HELP, show_default=False)]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
_err = Console(stderr=True, highlight=False, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        from memwoven import __version__

        typer.echo(f"memwoven {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """Inspect, export, import and migrate memwoven memory."""


def _print_json(value: Any) -> None:
    """Print `value` as indented JSON on stdout (non-ASCII kept as is)."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def _note(message: str) -> None:
    """A status line on stderr (stdout stays clean for data)."""
    _err.print(Text(message, style="dim"))


@contextmanager
def _resumable(command: str) -> Iterator[None]:
    """On Ctrl-C, say that running the same command again carries on; exit 130, the shell's code for it."""
    try:
        yield
    except BaseException as error:
        if not _while_interrupted(error):
            raise
        _err.print(Text(f"memwoven: error: interrupted; run the same {command} again and it resumes"))
        raise typer.Exit(130) from None


def _while_interrupted(error: BaseException) -> bool:
    """Whether `error` was raised while a Ctrl-C unwound (a driver's cleanup failing after the query it cancelled)."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        pending += [current.__cause__, current.__context__]
    return False


# demo ----------------------------------------------------------------------------------------------------------


@app.command()
def demo(
    url: Annotated[
        str | None,
        typer.Option(
            metavar="URL", help="Where to store (default: a SQLite file in a temporary directory, removed afterwards)."
        ),
    ] = None,
) -> None:
    """Show memwoven at work, offline.

    A scripted conversation with tool calls is written through the LangChain adapter and read back through the
    LlamaIndex one (through the core API when an adapter is not installed); a few documents are stored and
    recalled by meaning with HashingEmbedFn; then a summary of what is stored. No API key, no model, no server.
    """
    from memwoven.cli._demo import closing_hint, run_demo

    console = stdout_console()
    if url is not None:
        run_demo(url, console)
    else:
        with tempfile.TemporaryDirectory(prefix="memwoven-demo-") as directory:
            run_demo(f"sqlite:///{Path(directory) / 'demo.db'}", console)
    console.print(Text("\n" + closing_hint(url), style="dim"))


# sessions ------------------------------------------------------------------------------------------------------


@sessions_app.command("list")
def sessions_list(url: Url, as_json: Json = False) -> None:
    """List the sessions of a store.

    For each: its id, number of messages, last activity and size (the UTF-8 bytes of its messages' JSON).
    """
    store = Store(url)
    store.check_exists()
    store.require_chat()
    summaries = []
    if store.holds_chat():
        with store.chat() as chat:
            summaries = [summarize(chat, session_id) for session_id in chat.sessions()]
        summaries = [s for s in summaries if s.messages]  # cleared meanwhile
    if as_json:
        _print_json(
            [
                {
                    "id": s.id,
                    "messages": s.messages,
                    "last_activity": None if s.last_activity is None else s.last_activity.isoformat(),
                    "size": s.size,
                }
                for s in summaries
            ]
        )
        return
    console = stdout_console()
    if summaries:
        console.print(sessions_table(summaries))
    total = sum(s.messages for s in summaries)
    console.print(
        Text(f"{plural(len(summaries), 'session')}, {plural(total, 'message')} at {store.shown}", style="dim")
    )


@sessions_app.command("show")
def sessions_show(
    url: Url,
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session id.", show_default=False)],
    as_json: Json = False,
) -> None:
    """Show one session's messages.

    Roles, tool calls, tool results and images are shown readably; --json prints the messages as stored.
    """
    store = Store(url)
    store.check_exists()
    store.require_chat()
    messages: list[Message] = []
    version = 0
    if store.holds_chat():
        with store.chat() as chat:
            messages, version = chat.load_versioned(session_id)
    if not messages:
        raise Failure(f"no session {session_id!r} at {store.shown}")
    if as_json:
        _print_json({"id": session_id, "version": version, "messages": [m.model_dump(mode="json") for m in messages]})
        return
    stdout_console().print(messages_table(session_id, messages, version))


@sessions_app.command("delete")
def sessions_delete(
    url: Url,
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session id.", show_default=False)],
) -> None:
    """Delete one session and all its messages."""
    store = Store(url)
    store.check_exists()
    store.require_chat()
    if not store.holds_chat():
        raise Failure(f"no session {session_id!r} at {store.shown}")
    with store.chat() as chat:
        messages = chat.load(session_id)
        if not messages:
            raise Failure(f"no session {session_id!r} at {store.shown}")
        chat.clear(session_id)
    stdout_console().print(Text(f"deleted session {session_id!r} ({len(messages)} messages) from {store.shown}"))


# items ---------------------------------------------------------------------------------------------------------


def _namespace(text: str, *, prefix: bool = False, hint: str = "NAMESPACE") -> Namespace:
    """A namespace argument (`NAMESPACE_SYNTAX`) as a tuple; a usage error (exit code 2) naming `hint` if malformed."""
    try:
        return parse_namespace(text, prefix=prefix)
    except ValueError as error:
        raise typer.BadParameter(f"{error}; write {NAMESPACE_SYNTAX}", param_hint=hint) from None


@items_app.command("list")
def items_list(
    url: Annotated[
        str | None,
        typer.Argument(metavar="URL", help=f"{URL_HELP}; default: ${ITEM_URL_VARIABLE}", show_default=False),
    ] = None,
    prefix: Annotated[
        str,
        typer.Option(
            "--prefix",
            "-p",
            metavar="NAMESPACE",
            help=f"Only items whose namespace starts with this one: {NAMESPACE_SYNTAX}.",
        ),
    ] = "",
    filter_json: Annotated[
        str | None, typer.Option("--filter", metavar="JSON", help='A filter on the values, e.g. {"kind": "fact"}.')
    ] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=0, help="Show at most N items (0: all).")] = 100,
    as_json: Json = False,
) -> None:
    """List the items of a store, sorted by key, then namespace.

    For each: its namespace, key, version, last update, expiry, size (the UTF-8 bytes of its value's JSON) and the
    start of its value. --json prints the items as stored.
    """
    namespace = _namespace(prefix, prefix=True, hint="--prefix")
    where = _filter(filter_json)
    url = url or os.environ.get(ITEM_URL_VARIABLE, "").strip()
    if not url:
        raise click.UsageError(f"give the store's URL, or set {ITEM_URL_VARIABLE}")
    store = Store(url)
    store.check_exists()
    store.require_items()
    found, total = [], 0
    if store.holds_items():
        with store.items() as memory:
            found = memory.list(namespace, filter=where, limit=limit or None)
            total = memory.count(namespace, filter=where) if limit and len(found) == limit else len(found)
    if as_json:
        _print_json([item.model_dump(mode="json") for item in found])
        return
    console = stdout_console()
    if found:
        console.print(items_table(found))
    shown = f"{len(found)} of {total} items" if total > len(found) else plural(total, "item")
    more = " (--limit 0 shows all)" if total > len(found) else ""
    console.print(Text(f"{shown} at {store.shown}{more}", style="dim"))


@items_app.command("show")
def items_show(
    url: Url,
    namespace_text: Annotated[
        str, typer.Argument(metavar="NAMESPACE", help=f"The item's namespace: {NAMESPACE_SYNTAX}.", show_default=False)
    ],
    key: Annotated[str, typer.Argument(metavar="KEY", help="The item's key.", show_default=False)],
    as_json: Json = False,
) -> None:
    """Show one item: its value, version, times and expiry.

    --json prints the item as stored.
    """
    namespace = _namespace(namespace_text)
    store = Store(url)
    store.check_exists()
    store.require_items()
    item = None
    if store.holds_items():
        with store.items() as memory:
            item = memory.get(namespace, key)
    if item is None:
        raise Failure(f"no item {key!r} in namespace {namespace_text!r} at {store.shown}")
    if as_json:
        _print_json(item.model_dump(mode="json"))
        return
    stdout_console().print(item_table(item))


# export / import -----------------------------------------------------------------------------------------------


@contextmanager
def _output(path: Path | None) -> Iterator[BinaryIO]:
    """stdout, or a file written under a temporary name and renamed only when the export is complete."""
    if path is None:
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as stream:
            yield stream
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _counts(counts: Counts) -> str:
    return (
        f"{plural(counts.sessions, 'session')} ({plural(counts.messages, 'message')}), "
        f"{plural(counts.items, 'item')} and "
        f"{plural(counts.collections, 'collection')} ({plural(counts.documents, 'document')})"
    )


@app.command("export")
def export_command(
    url: Url,
    session: Annotated[
        list[str] | None,
        typer.Option("--session", "-s", metavar="ID", help="Export only this session (repeatable)."),
    ] = None,
    collection: Annotated[
        list[str] | None,
        typer.Option("--collection", "-c", metavar="NAME", help="Export only this vector collection (repeatable)."),
    ] = None,
    items_prefix: Annotated[
        list[str] | None,
        typer.Option(
            "--items",
            metavar="NAMESPACE",
            help=f"Export only the items under this namespace (repeatable): {NAMESPACE_SYNTAX}; '' for all items.",
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.", dir_okay=False)
    ] = None,
) -> None:
    """Export a store as JSON Lines.

    Everything, or only the sessions, collections and items named, in the versioned memwoven export format (see
    docs/export-format.md), embeddings included; to stdout unless --output is given.
    """
    namespaces = [_namespace(text, prefix=True, hint="--items") for text in items_prefix or ()]
    store = Store(url)
    store.check_exists()
    counts = Counts()
    with _output(output) as stream:
        records = export_records(
            store, sessions=session or (), collections=collection or (), namespaces=namespaces, counts=counts
        )
        for record in records:
            stream.write(dump_record(record))
    _note(f"exported {_counts(counts)} from {store.shown}")


@app.command("import")
def import_command(
    url: Url,
    input_path: Annotated[
        Path | None,
        typer.Option("--input", "-i", help="Read this file instead of stdin.", exists=True, dir_okay=False),
    ] = None,
) -> None:
    """Import an export into a store.

    Reads memwoven export JSON Lines from stdin (or --input): each session in it replaces the stored one, each
    item and document is upserted (items with their ttl; versions are the store's; items expired meanwhile are
    skipped). Importing the same file again changes nothing.
    """
    store = Store(url)
    store.scheme  # noqa: B018 - validates the URL before reading any input
    if input_path is None:
        if sys.stdin.isatty():
            raise click.UsageError("pipe an export into stdin (memwoven import URL < export.jsonl) or pass --input")
        with _resumable("import"):
            counts = import_records(store, sys.stdin.buffer)
    else:
        with _resumable("import"), open(input_path, "rb") as stream:
            counts = import_records(store, stream)
    _note(f"imported {_counts(counts)} into {store.shown}")


# migrate -------------------------------------------------------------------------------------------------------


class _Bars:
    """Rich progress bars on stderr, one per task."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def task(self, description: str, total: int) -> Callable[[int], None]:
        task = self.progress.add_task(description, total=total)
        return lambda steps: self.progress.advance(task, steps)


@app.command("migrate")
def migrate_command(
    source: Annotated[str, typer.Argument(metavar="FROM", help="The store to copy from.", show_default=False)],
    target: Annotated[str, typer.Argument(metavar="TO", help="The store to copy into.", show_default=False)],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be copied; write nothing.")] = False,
    batch_size: Annotated[int, typer.Option(min=1, help="Documents or items per read and write.")] = 1000,
) -> None:
    """Copy a whole store into another.

    Every chat session, item and vector collection of FROM is copied into TO with a progress bar, then the counts
    are verified (items keep their value and ttl; their versions are TO's). Resumable: what TO already holds
    identically is skipped, so after an interruption the same command carries on. --dry-run shows what would be
    copied and writes nothing.
    """
    origin, into = Store(source), Store(target)
    into.scheme  # noqa: B018 - validates the URL first
    origin.check_exists()
    if origin.url == into.url:
        raise Failure("FROM and TO are the same store")
    if dry_run:
        plan = plan_migration(origin)
        table = Table(title=Text(f"would copy {origin.shown} -> {into.shown}"), title_justify="left")
        table.add_column("kind")
        table.add_column("name", overflow="fold")
        table.add_column("items", justify="right")
        messages = sum(plan.sessions.values())
        table.add_row("sessions", plural(len(plan.sessions), "session"), plural(messages, "message"))
        table.add_row("items", plural(plan.item_namespaces, "namespace"), plural(plan.items, "item"))
        for info, size in plan.collections:
            detail = f"{plural(size, 'document')} ({info.metric}, dimension {info.dimension})"
            table.add_row("collection", Text(info.name), detail)
        if plan.sessions and not into.has_chat:
            raise Failure(f"{origin.shown} has chat sessions but {into.shown} stores vectors only")
        if plan.items and not into.has_items:
            into.require_items()
        console = stdout_console()
        console.print(table)
        console.print(Text("dry run: nothing was written (the target was not contacted)", style="dim"))
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
    )
    with _resumable("migrate"), Progress(*columns, console=_err, disable=not _err.is_terminal) as progress:
        report = migrate(origin, into, reporter=_Bars(progress), batch_size=batch_size)
    stdout_console().print(
        Text(
            f"migrated {origin.shown} -> {into.shown}: {plural(report.sessions, 'session')} "
            f"({plural(report.messages, 'message')}; {report.sessions_copied} written), "
            f"{plural(report.items, 'item')} ({report.items_copied} written), "
            f"{plural(report.collections, 'collection')} ({plural(report.documents, 'document')}; "
            f"{report.documents_copied} written); counts verified"
        )
    )


# vectors -------------------------------------------------------------------------------------------------------


@vectors_app.command("stats")
def vectors_stats(
    url: Url,
    collection: Annotated[str | None, typer.Option("--collection", "-c", help="Only this collection.")] = None,
    as_json: Json = False,
) -> None:
    """Show the vector collections of a store.

    For each: its number of documents, dimension, metric and the size of its float32 embeddings.
    """
    store = Store(url)
    store.check_exists()
    infos = [store.collection(collection)] if collection else store.collections()
    rows: list[dict[str, Any]] = []
    for info in infos:
        with store.vectors(info) as memory:
            count, found = memory.count(), memory.dimension
        rows.append({"collection": info.name, "documents": count, "dimension": found, "metric": info.metric})
    if as_json:
        _print_json(rows)
        return
    console = stdout_console()
    table = Table()
    table.add_column("collection", overflow="fold")
    table.add_column("documents", justify="right")
    table.add_column("dimension", justify="right")
    table.add_column("metric")
    table.add_column("embeddings", justify="right")
    for row in rows:
        size = row["documents"] * (row["dimension"] or 0) * 4
        table.add_row(
            Text(row["collection"]), str(row["documents"]), str(row["dimension"]), row["metric"], human_size(size)
        )
    if rows:
        console.print(table)
    console.print(Text(f"{plural(len(rows), 'collection')} at {store.shown}", style="dim"))


def _embed_fn(spec: str | None, dimension: int) -> EmbedFn:
    """`module:attribute` naming an EmbedFn or a function returning one; default `HashingEmbedFn(dimension)`."""
    if not spec:
        return HashingEmbedFn(dimension)
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise typer.BadParameter(f"expected module:attribute, got {spec!r}", param_hint="--embed-fn")
    try:
        found: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise Failure(f"cannot load the EmbedFn {spec!r}: {error}") from None
    if not isinstance(found, EmbedFn) and callable(found):
        found = found()
    if not isinstance(found, EmbedFn):
        raise Failure(f"{spec!r} is not an EmbedFn (nor a function returning one)")
    return found


def _filter(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError as error:
        raise typer.BadParameter(f"not JSON: {error}", param_hint="--filter") from None
    if not isinstance(parsed, dict):
        raise typer.BadParameter("a filter is a JSON object", param_hint="--filter")
    return parsed


@vectors_app.command("search")
def vectors_search(
    url: Url,
    text: Annotated[str, typer.Argument(metavar="TEXT", help="What to search for.", show_default=False)],
    collection: Annotated[
        str | None, typer.Option("--collection", "-c", help="The collection (default: the only one).")
    ] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="How many hits at most.")] = 5,
    threshold: Annotated[float | None, typer.Option(help="Only hits scoring above this.")] = None,
    filter_json: Annotated[
        str | None, typer.Option("--filter", metavar="JSON", help='A metadata filter, e.g. {"topic": "diet"}.')
    ] = None,
    dimension: Annotated[
        int | None,
        typer.Option(min=2, help="HashingEmbedFn's dimension (default: the collection's dimension)."),
    ] = None,
    embed_fn: Annotated[
        str | None,
        typer.Option(
            "--embed-fn",
            metavar="MODULE:ATTR",
            envvar="MEMWOVEN_EMBED_FN",
            help="The EmbedFn to embed TEXT with (an EmbedFn or a function returning one); default HashingEmbedFn.",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Search a collection by meaning.

    TEXT is embedded with the configured EmbedFn (--embed-fn or $MEMWOVEN_EMBED_FN; by default HashingEmbedFn of
    the collection's dimension) and the nearest documents are shown, best first.
    """
    where = _filter(filter_json)
    store = Store(url)
    store.check_exists()
    if collection is None:
        infos = store.collections()
        if len(infos) != 1:
            names = ", ".join(info.name for info in infos)
            if not infos:
                raise Failure(f"no vector collections at {store.shown}")
            raise click.UsageError(f"{store.shown} has several collections ({names}); choose one with --collection")
        info = infos[0]
    else:
        info = store.collection(collection)
    embed = _embed_fn(embed_fn, dimension or info.dimension or 384)
    with store.vectors(info) as memory:
        hits = memory.search(embed(text), top_k=top_k, threshold=threshold, filter=where)
    if as_json:
        _print_json(
            [
                {"id": h.document.id, "score": h.score, "content": h.document.content, "metadata": h.document.metadata}
                for h in hits
            ]
        )
        return
    console = stdout_console()
    if hits:
        console.print(search_table(hits))
    console.print(Text(f"{plural(len(hits), 'hit')} in {info.name!r} at {store.shown} ({embed!r})", style="dim"))


# Plugins -------------------------------------------------------------------------------------------------------

PLUGIN_GROUP = "memwoven.cli"
"""The entry point group of command groups other distributions add: ``name = "module:app"``, a `typer.Typer`
that becomes ``memwoven <name> ...`` (langgraph-checkpoint-memwoven adds ``threads``). The core never imports an
adapter: the plugin imports the core."""
_plugins_loaded = False


def add_plugins(target: typer.Typer, entries: Sequence[importlib.metadata.EntryPoint] | None = None) -> list[str]:
    """Add each entry point of `PLUGIN_GROUP` (or `entries`) to `target` as a command group; the names added. One
    that does not load, is no `typer.Typer` or takes a name already in use is skipped with a one-line warning."""
    if entries is None:
        entries = list(importlib.metadata.entry_points(group=PLUGIN_GROUP))
    taken = set(typer.main.get_command(target).commands) if entries else set()  # type: ignore[attr-defined]
    added = []
    for entry in entries:
        try:
            if entry.name in taken:
                raise ValueError(f"the command {entry.name!r} exists already")
            plugin = entry.load()
            if not isinstance(plugin, typer.Typer):
                raise TypeError(f"{entry.value} is a {type(plugin).__name__}, not a typer.Typer")
        except Exception as error:  # noqa: BLE001 - a broken plugin must not take the command line down
            line = " ".join(_reason(error).split())
            _err.print(Text(f"memwoven: warning: plugin {entry.name!r} ({entry.value}) skipped: {line}"))
            continue
        target.add_typer(plugin, name=entry.name)
        taken.add(entry.name)
        added.append(entry.name)
    return added


def load_plugins() -> None:
    """Add the installed plugins to the `memwoven` command line, once."""
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        add_plugins(app)


def _core_command(arguments: Sequence[str]) -> bool:
    """Whether `arguments` run a core command (plugins then stay unloaded: nothing of theirs is imported)."""
    first = next((argument for argument in arguments if not argument.startswith("-")), None)
    return first is not None and first in typer.main.get_command(app).commands  # type: ignore[attr-defined]


# Running -------------------------------------------------------------------------------------------------------


def _fail(message: str, argv: Sequence[str]) -> NoReturn:
    for argument in argv:  # whatever a driver put in its message, no secret of a URL on the command line
        if "://" in argument:
            message = redact_text(message, argument)
    line = " ".join(message.split())  # one line, whatever the exception said
    _err.print(Text(f"memwoven: error: {line}"), soft_wrap=True)
    raise SystemExit(1)


def _reason(error: BaseException) -> str:
    if isinstance(error, MemwovenError):
        return str(error)
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return f"{type(error).__name__}: {error}"


def run(argv: Sequence[str] | None = None) -> None:
    """Run the command line on `argv` (default: `sys.argv[1:]`) and exit with its code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        if not _core_command(arguments):
            load_plugins()
        app(args=arguments, prog_name="memwoven")
    except click.ClickException as error:  # bad usage found inside a command (the parser's own exit by itself)
        error.show()
        raise SystemExit(error.exit_code) from None
    except Exception as error:
        if os.environ.get("MEMWOVEN_DEBUG"):
            raise
        _fail(_reason(error), arguments)
