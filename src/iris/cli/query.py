"""`iris query SQL`: a read-only SQL statement against the controller's database, as a table."""

from __future__ import annotations

from iris.cli import commands as cmd
from iris.cli.main import CliContext, output_option


@cmd.command("query")
@cmd.argument("sql")
@cmd.option("--limit", type=cmd.IntRange(min=0), default=0, help="At most this many rows (0: the server's default).")
@output_option
@cmd.pass_obj
def query(obj: CliContext, sql: str, limit: int) -> None:
    """Runs SQL (read-only: a write is refused) and prints the rows.

    Example: iris query "SELECT job_id, state FROM jobs ORDER BY submitted_ms DESC LIMIT 5"
    """
    from iris.cli.output import query_rows, query_table

    resp = obj.client().query(sql, limit=limit)
    if obj.json:
        obj.emit({"columns": list(resp.columns), "rows": query_rows(resp), "truncated": resp.truncated})
    else:
        cmd.echo(query_table(resp))
