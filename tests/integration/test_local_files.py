"""The local file system deltastate's sessions use (io.deltastate.JavaLocalFileSystem, and JavaLocalFs
for FileContext) sets the modes, reports the statuses and renames as the one Spark ships for file:
does (Hive's ProxyLocalFileSystem, found by Hadoop's service loader), and a micro-batch's file work
(Parquet files, Delta commits, streaming checkpoints, RocksDB changelog files) starts no shell
command, counted with JFR's process-start events in the session's JVM; the stock file systems, from
the same JVM, start them."""

import os
import uuid
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

pytestmark = pytest.mark.integration

SHELL_COMMANDS = ("chmod", "readlink")


def _stock_conf(spark):
    """The session's Hadoop configuration with the file systems a session gets without deltastate's."""
    conf = spark._jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
    conf.unset("fs.file.impl")
    conf.set("fs.AbstractFileSystem.file.impl", "org.apache.hadoop.fs.local.LocalFs")
    conf.setBoolean("fs.file.impl.disable.cache", True)
    return conf


def _file_systems(spark):
    """(deltastate's, Hadoop's own) local FileSystem, from the session's configuration."""
    jvm = spark._jvm
    uri = jvm.java.net.URI("file:///")
    ours = jvm.org.apache.hadoop.fs.FileSystem.get(uri, spark._jsc.hadoopConfiguration())
    return ours, jvm.org.apache.hadoop.fs.FileSystem.newInstance(uri, _stock_conf(spark))


class _ShellCommands:
    """The shell commands (chmod, readlink) the JVM starts while inside the block, by JFR."""

    def __init__(self, spark, folder: Path) -> None:
        self.spark, self.file = spark, folder / f"{uuid.uuid4().hex}.jfr"
        self.commands: list[str] = []

    def __enter__(self) -> "_ShellCommands":
        jfr = self.spark._jvm.jdk.jfr
        self.recording = jfr.Recording()
        self.recording.enable("jdk.ProcessStart")
        self.recording.start()
        return self

    def __exit__(self, *exc) -> None:
        self.recording.stop()
        path = self.spark._jvm.java.io.File(str(self.file)).toPath()
        self.recording.dump(path)
        self.recording.close()
        events = self.spark._jvm.jdk.jfr.consumer.RecordingFile.readAllEvents(path)
        for i in range(events.size()):
            command = str(events.get(i).getString("command"))
            if command.split(" ", 1)[0] in SHELL_COMMANDS:
                self.commands.append(command)


def test_sessions_use_it_for_file_paths(spark) -> None:
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    ours, _ = _file_systems(spark)
    assert ours.getClass().getName() == "io.deltastate.JavaLocalFileSystem"
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)
    assert context.getDefaultFileSystem().getClass().getName() == "io.deltastate.JavaLocalFs"


@pytest.mark.parametrize("mode", [0o640, 0o755, 0o600, 0o444, 0o000, 0o777])
def test_a_mode_is_set_as_hadoop_sets_it(spark, tmp_path: Path, mode: int) -> None:
    jvm = spark._jvm
    ours, stock = _file_systems(spark)
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(jvm.java.lang.Short.valueOf(str(mode)))
    for name, fs in (("ours", ours), ("stock", stock)):
        (tmp_path / name).write_text("x")
        os.chmod(tmp_path / name, 0o123)
        fs.setPermission(jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path / name}"), permission)
    assert (tmp_path / "ours").stat().st_mode & 0o7777 == (tmp_path / "stock").stat().st_mode & 0o7777 == mode


def test_the_stock_file_system_is_the_one_spark_ships(spark) -> None:
    _, stock = _file_systems(spark)
    assert stock.getClass().getName() == "org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem"


def test_a_rename_onto_a_file_is_refused_as_the_stock_one_refuses_it(spark, tmp_path: Path) -> None:
    """Delta Kernel's put-if-absent writes (a temporary file renamed) rely on the refusal."""
    jvm = spark._jvm

    def renames(fs, folder: Path) -> list:
        folder.mkdir()
        for name in ("a", "b", "c"):
            (folder / name).write_text(name)
        (folder / "into").mkdir()
        path = lambda name: jvm.org.apache.hadoop.fs.Path(f"file:{folder / name}")  # noqa: E731
        done = [fs.rename(path("a"), path("b")), fs.rename(path("a"), path("new")), fs.rename(path("c"), path("into"))]
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".crc"))
        return [done, files, [(folder / f).read_text() for f in files]]

    ours, stock = _file_systems(spark)
    expected = renames(stock, tmp_path / "stock")
    assert renames(ours, tmp_path / "ours") == expected
    assert expected[0] == [False, True, True] and expected[1] == ["b", "into/c", "new"]


def test_a_missing_file_is_not_found(spark, tmp_path: Path) -> None:
    jvm = spark._jvm
    ours, _ = _file_systems(spark)
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(jvm.java.lang.Short.valueOf("420"))
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        ours.setPermission(jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/none"), permission)


def test_link_status_is_hadoops_own(spark, tmp_path: Path) -> None:
    jvm = spark._jvm
    ours, stock = _file_systems(spark)
    (tmp_path / "file").write_text("twelve bytes")
    (tmp_path / "folder").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "file")

    def status(fs, name: str) -> tuple:
        s = fs.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path / name}"))
        return (s.getPath().toString(), s.getLen(), s.isDirectory(), s.isSymlink(), s.getModificationTime())

    for name in ("file", "folder", "link"):
        assert status(ours, name) == status(stock, name), name
    assert status(ours, "file")[1:4] == (12, False, False)
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        status(ours, "none")


def test_hadoops_own_rename_starts_shell_commands(spark, tmp_path: Path) -> None:
    """The probe's control: the same JVM, Hadoop's own FileContext, one create and one rename."""
    jvm = spark._jvm
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), _stock_conf(spark))
    (tmp_path / "a").write_text("x")
    with _ShellCommands(spark, tmp_path) as seen:
        rename = jvm.org.apache.hadoop.fs.Options.Rename
        context.rename(jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/a"), jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/b"),
                       spark._sc._gateway.new_array(rename, 0))
    assert (tmp_path / "b").exists()
    assert any(c.startswith("readlink") for c in seen.commands), seen.commands


def test_a_stateful_batch_and_delta_commits_start_no_shell_command(spark, tmp_path: Path) -> None:
    source, table, checkpoint = tmp_path / "source", str(tmp_path / "table"), str(tmp_path / "checkpoint")
    spark.range(0, 200).selectExpr("id % 7 AS k", "id").write.parquet(str(source))
    with _ShellCommands(spark, tmp_path) as seen:
        spark.range(5).write.format("delta").save(table + "-plain")
        spark.range(5).write.format("delta").mode("append").save(table + "-plain")
        query = (spark.readStream.schema("k long, id long").parquet(str(source)).groupBy("k").count()
                 .writeStream.format("delta").outputMode("complete").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start(table))
        query.awaitTermination(300)
    assert query.exception() is None
    assert sorted(tuple(r) for r in spark.read.format("delta").load(table).collect()) == [
        (k, len([i for i in range(200) if i % 7 == k])) for k in range(7)]
    assert (Path(checkpoint) / "state").is_dir() and (Path(checkpoint) / "commits" / "0").exists()
    assert seen.commands == []
