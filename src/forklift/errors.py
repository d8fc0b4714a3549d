"""The one error tree. Every error carries a user-facing ``fix`` (the next thing to do).

Library code raises these; only ``forklift.cli`` prints them or exits.
"""

from __future__ import annotations

from collections.abc import Sequence


class ForkliftError(Exception):
    """Base of every error forklift raises on purpose.

    ``fix`` is one sentence telling the user what to do next; ``exit_code`` is what the CLI exits with.
    """

    exit_code: int = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message


class RecipeError(ForkliftError):
    """A recipe file or override is invalid: names the file, the field path and the fix."""

    exit_code = 2

    def __init__(
        self, message: str, *, source: str | None = None, problems: Sequence[str] = (), fix: str | None = None
    ) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__(message, fix=fix)


class RecipeNotFoundError(RecipeError):
    """A recipe name or path that does not exist."""


class ModelError(ForkliftError):
    """The model cannot be found, prepared or described."""


class ModelNotFoundError(ModelError):
    """A model path or id that does not resolve to files on disk."""


class HubError(ModelError):
    """The Hugging Face Hub (or HF_ENDPOINT's mirror) refused a request or could not be read."""


class HubIdError(HubError):
    """What was typed is not a Hugging Face id (ORG/NAME[@REVISION]): a usage error."""

    exit_code = 2


class TransferError(ForkliftError):
    """Copying weights or an image to a node failed, or what arrived does not match its source."""

    def __init__(self, message: str, *, host: str | None = None, fix: str | None = None) -> None:
        self.host = host
        super().__init__(message, fix=fix)


class UnknownArchitectureError(ModelError):
    """A config.json the planner cannot describe."""


class HardwareError(ForkliftError):
    """A hardware profile that does not exist or cannot be detected."""


class HardwareProfileError(HardwareError):
    """A profile name or file the user gave that names no usable profile (exit 2: bad input)."""

    exit_code = 2


class PlanError(ForkliftError):
    """A deployment that cannot work as asked (does not fit, bad parallel layout)."""


class PlanInputError(PlanError):
    """An input to the planner that cannot be read (a --calibrate log; exit 2)."""

    exit_code = 2


class DoesNotFitError(PlanError):
    """The model plus one max_model_len request does not fit in the planned memory."""


class SpeculativeConfigError(PlanError):
    """A speculative config that vLLM rejects, or that breaks, with this layout and release (before any start).

    ``findings`` are the rules that refused it (``forklift.speculative.rules.Finding``), each with its source."""

    def __init__(self, message: str, *, fix: str | None = None, findings: Sequence[object] = ()) -> None:
        self.findings = list(findings)
        super().__init__(message, fix=fix)


class EngineError(ForkliftError):
    """The vLLM engine is missing, broken, or failed."""


class EngineNotInstalledError(EngineError):
    """vLLM is not importable where the recipe runs it."""


class EngineStartupError(EngineError):
    """A rank exited, or never became ready, during ``up``."""

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        host: str | None = None,
        log_tail: Sequence[str] = (),
        log_path: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.rank = rank
        self.host = host
        self.log_tail = list(log_tail)
        self.log_path = log_path
        super().__init__(message, fix=fix)


class ProbeError(EngineError):
    """``forklift probe`` could not measure: the start never logged its KV sizing in time, or left a process."""


class RunnerError(ForkliftError):
    """A command could not be run on a host."""


class SshTargetError(RunnerError):
    """An ssh destination that is not ``[user@]host[:port]`` (it could be read as an ssh option)."""

    exit_code = 2


class EnvNameError(RunnerError):
    """An environment variable name that is not ``[A-Za-z_][A-Za-z0-9_]*``, or a value that cannot be passed."""

    exit_code = 2


class RemoteCommandError(RunnerError):
    """A command ran and failed."""

    def __init__(
        self,
        message: str,
        *,
        host: str,
        argv: Sequence[str],
        returncode: int | None,
        stderr_tail: str = "",
        fix: str | None = None,
    ) -> None:
        self.host = host
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        super().__init__(message, fix=fix)


class HostUnreachableError(RunnerError):
    """SSH could not reach a host (network, key, host key)."""

    def __init__(self, message: str, *, host: str, fix: str | None = None) -> None:
        self.host = host
        super().__init__(message, fix=fix)


class PreflightError(ForkliftError):
    """One or more nodes failed preflight; nothing was started. ``failures`` holds the failed checks."""

    def __init__(self, message: str, *, failures: Sequence[object] = (), fix: str | None = None) -> None:
        self.failures = list(failures)
        super().__init__(message, fix=fix)


class RunError(ForkliftError):
    """A run record problem: missing, already running, stale."""


class RunNotFoundError(RunError):
    """No run record under that name (a usage error: exit 2)."""

    exit_code = 2


class RunNameError(RunError):
    """A run name forklift cannot use (a usage error: exit 2)."""

    exit_code = 2


class UnreadableRecordError(RunError):
    """A run record that is not valid JSON of the record's shape (truncated, edited, another program's)."""


class RecordNewerError(RunError):
    """A run record written by a newer forklift than this one."""


class StateDirError(ForkliftError):
    """forklift's state folder (FORKLIFT_HOME) cannot be written."""

    exit_code = 2


class RunAlreadyRunningError(RunError):
    """``up`` with a name whose deployment is still alive."""


class PortInUseError(ForkliftError):
    """The serving port is taken by another process."""

    def __init__(
        self, message: str, *, port: int, holder: str | None = None, fix: str | None = None
    ) -> None:
        self.port = port
        self.holder = holder
        super().__init__(message, fix=fix)


class EndpointError(ForkliftError):
    """The server could not be reached or answered something an OpenAI-compatible server does not.
    ``status_code`` is the HTTP status when the server answered one."""

    exit_code = 2

    def __init__(self, message: str, *, fix: str | None = None, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message, fix=fix)


class ApiKeyMissingError(EndpointError):
    """The run needs an API key from an environment variable that is not set here."""


class CheckError(ForkliftError):
    """An acceptance check could not run at all (unreachable endpoint, bad arguments).

    Exits 2, apart from 1 for "checks ran and one failed"."""

    exit_code = 2


class BenchError(ForkliftError):
    """A benchmark could not run at all (exit 2; a run cut short by a dying server exits 3)."""

    exit_code = 2


class CompareError(ForkliftError):
    """Two saved results cannot be read or compared (exit 2)."""

    exit_code = 2


class MonitorError(ForkliftError):
    """``top`` or ``monitor export`` could not run: nothing to watch, a saved result unreadable, an output
    directory unwritable (exit 2)."""

    exit_code = 2


class CanaryError(ForkliftError):
    """A canary could not run at all: no baseline run, no saved results, nowhere to put the candidate (exit 2).
    A candidate that regresses or breaks is a verdict, not this error."""

    exit_code = 2


class TuneError(ForkliftError):
    """``forklift tune`` could not run at all: a bad SLO or workload, no candidate the plan says fits, a budget too
    small for one measurement (exit 2). A candidate that fails to start is a row of the result, not this error."""

    exit_code = 2


class DoctorError(ForkliftError):
    """Doctor could not read its inputs or its knowledge base."""


class PatchError(ForkliftError):
    """A patch definition is invalid, or cannot be applied safely."""


class UnknownPatchError(PatchError):
    """A patch id no catalog holds (exit 2: bad input)."""

    exit_code = 2


class PatchDriftError(PatchError):
    """A patch's anchor no longer matches its target file."""


class PatchConflictError(PatchDriftError):
    """An anchor no longer matches (drift), the target vanished, or a patched file was changed."""

    def __init__(self, message: str, *, patch_id: str, kind: str, file: str | None,
                 problems: Sequence[str] = (), fix: str | None = None) -> None:
        self.patch_id = patch_id
        self.kind = kind
        self.file = file
        self.problems = list(problems)
        super().__init__(message, fix=fix)


class PatchVersionError(PatchError):
    """The installed vLLM is outside the patch's version range (or its version is unknown)."""


class PatchReadOnlyError(PatchError):
    """The target files cannot (or must not) be written."""


class PatchVerifyError(PatchError):
    """After applying, the patched behaviour is not there."""


class NodeError(ForkliftError):
    """Host preparation failed or was refused."""


class SudoRequiredError(NodeError):
    """The login user is not root and ``sudo -n`` does not work: here are the commands to run by hand."""

    def __init__(self, message: str, *, host: str, commands: Sequence[str], fix: str | None = None) -> None:
        self.host = host
        self.commands = list(commands)
        super().__init__(message, fix=fix)


class SupervisorGaveUpError(RunError):
    """The supervisor stopped restarting a deployment: the cap was reached, a start failed the same way twice, or
    memory did not come back. Exit code 3, which the systemd unit lists in RestartPreventExitStatus (no loop)."""

    exit_code = 3


class ServiceError(ForkliftError):
    """A systemd unit could not be written, enabled or removed, or this run cannot have one."""

    exit_code = 2


class StackDoesNotFitError(DoesNotFitError):
    """A stack's members do not fit together on a shared node; ``table`` is the per-device table."""

    def __init__(self, message: str, *, table: str, fix: str | None = None) -> None:
        super().__init__(f"{message}\n{table}", fix=fix)
        self.table = table


class StackMemberError(ForkliftError):
    """A stack member did not start; the members this ``stack up`` had started were stopped again, in reverse.
    ``cause`` is the member's own error (its message carries the engine's log tail and doctor's finding)."""

    def __init__(self, message: str, *, member: str, run: str, stopped: Sequence[str], cause: ForkliftError,
                 ) -> None:
        super().__init__(f"{message}\n{cause.message}", fix=cause.fix)
        self.member = member
        self.run = run
        self.stopped = list(stopped)
        self.cause = cause
        self.exit_code = cause.exit_code
        self.log_tail = list(getattr(cause, "log_tail", None) or ())
        """The failing member's engine log tail, when its error has one (the CLI prints it)."""


class StackNotFoundError(ForkliftError):
    """No stack of that name was started from this state dir."""


class GatewayError(ForkliftError):
    """The gateway cannot start, or a key or its store is wrong."""


class GatewayKeyError(GatewayError):
    """A key name that does not exist, or one that already does (exit 2: bad input)."""

    exit_code = 2


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, CI and systemd send), raised by the CLI's handler: every command cleans up as it does
    on Ctrl-C, and says which signal it was."""


class RemoteHeadError(ForkliftError):
    """The supervisor could not be started or read on a remote head (forklift missing or too old there)."""

    exit_code = 2
