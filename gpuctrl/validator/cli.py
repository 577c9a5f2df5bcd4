"""``gpuctrl validate driver|toolkit|cuda|plugin``: one check, its status file, its exit code;
``gpuctrl validate metrics``: the node status exporter, serving the checks' gauges until stopped.

Exit codes: 0 the check passed (``<output-dir>/<check>-ready`` written), 1 it failed, 2 the
input is invalid (a broken template or overrides file, a missing ConfigMap key, ...). The
driver check's file is the env NVIDIA's images source (`driver_ready_env`); the others hold
the check's report. The exporter (`gpuctrl.validator._exporter`) exits 0 on SIGTERM or SIGINT,
2 on invalid input or a port it cannot bind.

In the validator DaemonSet each check is an init container. For the cuda and plugin checks
the agent learns its own pod from the downward API through two environment variables, both
or neither: ``GPUCTRL_POD_NAME`` (``metadata.name``) and ``GPUCTRL_POD_UID``
(``metadata.uid``); its workload pods are then owned by, and deleted with, that pod.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpuctrl.flags import add_log_format
from gpuctrl.validator._pod import PodOwner, overrides_problems
from gpuctrl.validator._smi import (
    SmiResult,
    driver_command,
    driver_ready_env,
    run_smi,
    toolkit_command,
)
from gpuctrl.validator._status import (
    DEFAULT_OUTPUT_DIR,
    DRIVER_CONTAINER_MARK,
    clear_status,
    write_status,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kubernetes_asyncio.client import ApiClient

    from api.v1alpha1 import ValidatorWorkloads

__all__ = ["POD_NAME_ENV", "POD_UID_ENV", "configure", "run"]

POD_NAME_ENV = "GPUCTRL_POD_NAME"
POD_UID_ENV = "GPUCTRL_POD_UID"

DEFAULT_CONFIGMAP = "gpuctrl-validator-workloads"

_PASSED, _FAILED, _INVALID = 0, 1, 2


class InvalidInput(Exception):
    """Input the agent cannot use (exit code 2); the message says what and where."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``validate`` arguments: one sub-command per check."""
    checks = parser.add_subparsers(dest="check", required=True, metavar="CHECK")
    driver = checks.add_parser("driver", help="run nvidia-smi in the driver's root")
    _add_smi_arguments(driver)
    driver.add_argument(
        "--host-root", type=Path, default=Path("/host"), help="the host's root (default /host)"
    )
    driver.add_argument(
        "--driver-root",
        type=Path,
        default=Path("/run/nvidia/driver"),
        help="where a driver container installs the driver (default /run/nvidia/driver); "
        "used when it holds nvidia-smi, else the host root",
    )
    driver.add_argument(
        "--driver-container",
        action="store_true",
        help="a driver container installs the driver: unless the host has its own, wait for "
        f"its ready mark (<output-dir>/{DRIVER_CONTAINER_MARK}) before checking its root",
    )
    _add_smi_arguments(checks.add_parser("toolkit", help="run nvidia-smi in this container"))
    for name, summary in (
        ("cuda", "run the CUDA workload pod on the node"),
        ("plugin", "run the device-plugin workload pod (one nvidia.com/gpu) on the node"),
    ):
        _add_workload_arguments(checks.add_parser(name, help=summary))
    _add_metrics_arguments(
        checks.add_parser("metrics", help="serve the node's status as Prometheus gauges")
    )


def run(args: argparse.Namespace) -> int:
    """Run the chosen check: clear its status file, run it, write the file if it passed.
    ``metrics`` serves the node status gauges until SIGTERM or SIGINT instead."""
    if args.check == "metrics":
        return _serve_metrics(args)
    clear_status(args.output_dir, args.check)
    try:
        passed, report = _run_check(args)
    except InvalidInput as error:
        print(f"gpuctrl validate {args.check}: {error}", file=sys.stderr)
        return _INVALID
    if not passed:
        print(f"{args.check} validation failed:\n{report}", file=sys.stderr)
        return _FAILED
    if args.check == "driver":  # NVIDIA's images source it: their env, not a report
        content = driver_ready_env(args.host_root, args.driver_root)
    else:
        content = f"{report}\n"
    write_status(args.output_dir, args.check, content)
    if args.check == "driver":
        print(report)
    print(f"{args.check} validation passed")
    return _PASSED


def _add_common_arguments(parser: argparse.ArgumentParser, timeout_help: str) -> None:
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT_DIR,
        help=f"where <check>-ready is written on success (default {DEFAULT_OUTPUT_DIR})",
    )
    parser.add_argument("--timeout", type=_positive_float, metavar="SECONDS", help=timeout_help)


def _add_smi_arguments(parser: argparse.ArgumentParser) -> None:
    _add_common_arguments(parser, "give up after this long (default 300)")
    parser.add_argument("--wait", action="store_true", help="retry until it works or the timeout")
    parser.add_argument(
        "--retry-interval",
        type=_positive_float,
        default=5.0,
        metavar="SECONDS",
        help="pause between tries with --wait (default 5)",
    )


def _add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    _add_common_arguments(
        parser, "give up after this long (default: the overrides' timeoutSeconds, else 300)"
    )
    add_log_format(parser)  # the workload checks log their pods' progress
    parser.add_argument("--node", required=True, help="the node to validate")
    parser.add_argument("--namespace", required=True, help="namespace of the pods and ConfigMap")
    parser.add_argument("--kubeconfig", type=Path, help="use this kubeconfig, not in-cluster")
    parser.add_argument(
        "--templates-configmap",
        help="ConfigMap holding cuda.yaml and plugin.yaml (default: the overrides' "
        f"configMapName, else {DEFAULT_CONFIGMAP})",
    )
    given = parser.add_mutually_exclusive_group()
    given.add_argument(
        "--overrides-file",
        type=Path,
        help="YAML mapping with the keys of a ClusterPolicy's validator.workloads",
    )
    given.add_argument(
        "--overrides",
        metavar="JSON",
        help="the same mapping as JSON text (the DaemonSet passes $(GPUCTRL_VALIDATOR_WORKLOADS))",
    )
    parser.add_argument(
        "--image",
        help="image of the workload pods (default: the overrides' image, else the API's "
        "default: NVIDIA's CUDA vectorAdd sample)",
    )
    parser.add_argument(
        "--image-pull-policy",
        choices=["Always", "IfNotPresent", "Never"],
        help="(default: the overrides' imagePullPolicy, else IfNotPresent)",
    )


def _add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    add_log_format(parser)
    parser.add_argument(
        "--port", type=_port, default=8000, help="serve /metrics on this port (default 8000)"
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT_DIR,
        help=f"where the checks write <check>-ready (default {DEFAULT_OUTPUT_DIR})",
    )
    parser.add_argument(
        "--host-root",
        type=Path,
        default=Path("/host"),
        help="the host's root: its sys/bus/pci/devices and, without a driver container's, "
        "its driver (default /host)",
    )
    parser.add_argument(
        "--driver-root",
        type=Path,
        default=Path("/run/nvidia/driver"),
        help="where a driver container installs the driver (default /run/nvidia/driver)",
    )
    parser.add_argument("--node", required=True, help="this node's name (the gauges' label)")
    parser.add_argument("--kubeconfig", type=Path, help="use this kubeconfig, not in-cluster")
    parser.add_argument(
        "--interval",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="run the driver check and count the Node's GPUs and the PCI devices this often "
        "(default 60)",
    )


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1-65535)")
    return int(text)


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _serve_metrics(args: argparse.Namespace) -> int:
    from gpuctrl.runtime import configure_logging
    from gpuctrl.validator._exporter import CannotServe, ExporterSettings, serve

    settings = ExporterSettings(
        port=args.port,
        node=args.node,
        output_dir=args.output_dir,
        host_root=args.host_root,
        driver_root=args.driver_root,
        interval=args.interval,
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signal_number, stop.set)
        api = await _api_client(args.kubeconfig)
        configure_logging(json_lines=args.log_format == "json")  # once the input is known good
        try:
            await serve(settings, api, stop)
        finally:
            await api.close()

    try:
        asyncio.run(main())
    except (InvalidInput, CannotServe) as error:
        print(f"gpuctrl validate metrics: {error}", file=sys.stderr)
        return _INVALID
    return 0


def _run_check(args: argparse.Namespace) -> tuple[bool, str]:
    """Run the check; return whether it passed and a report. Raises `InvalidInput`."""
    if args.check in ("driver", "toolkit"):
        result = _run_smi_check(args)
        return result.passed, result.describe()
    return asyncio.run(_run_workload(args))


def _run_smi_check(args: argparse.Namespace) -> SmiResult:
    if args.check == "driver":
        host_root, driver_root = args.host_root, args.driver_root
        mark = args.output_dir / DRIVER_CONTAINER_MARK if args.driver_container else None
        return run_smi(
            lambda: driver_command(host_root, driver_root, mark),
            wait=args.wait,
            timeout=args.timeout or 300.0,
            interval=args.retry_interval,
        )
    return run_smi(
        toolkit_command, wait=args.wait, timeout=args.timeout or 300.0, interval=args.retry_interval
    )


async def _run_workload(args: argparse.Namespace) -> tuple[bool, str]:
    # Imported here: the driver and toolkit checks never need the Kubernetes client.
    import aiohttp

    from gpuctrl.runtime import ApiError, configure_logging
    from gpuctrl.validator._pod import InvalidOverrides
    from gpuctrl.validator._template import TemplateError
    from gpuctrl.validator._verdict import Passed
    from gpuctrl.validator._workload import WorkloadCheck, run_workload_check

    configure_logging(json_lines=args.log_format == "json")
    overrides, where = _load_overrides(args.overrides_file, args.overrides)
    check = WorkloadCheck(
        check=args.check,
        namespace=args.namespace,
        node_name=args.node,
        configmap=args.templates_configmap or overrides.config_map_name or DEFAULT_CONFIGMAP,
        image=args.image or overrides.image,
        image_pull_policy=args.image_pull_policy or overrides.image_pull_policy,
        overrides=overrides,
        owner=_own_pod(os.environ),
        timeout=args.timeout or float(overrides.timeout_seconds),
    )
    api = await _api_client(args.kubeconfig)
    try:
        result = await run_workload_check(api, check)
    except TemplateError as error:
        raise InvalidInput(f"{error} (no pod created)") from error
    except InvalidOverrides as error:
        raise InvalidInput(f"{where}: {error} (no pod created)") from error
    except ApiError as error:
        return False, f"the API refused: {error}"
    except (aiohttp.ClientError, TimeoutError) as error:
        return False, f"cannot reach the API: {error!r}"
    finally:
        await api.close()
    if isinstance(result, Passed):
        return True, f"{args.check} workload pod passed on node {args.node}"
    return False, f"{result.reason}: {result.message}"


def _load_overrides(path: Path | None, text: str | None) -> tuple[ValidatorWorkloads, str]:
    """The overrides from the file at ``path`` or from ``text`` (YAML or JSON), else defaults,
    and where they came from, as error messages name it."""
    import pydantic
    import yaml

    from api.v1alpha1 import ValidatorWorkloads

    if path is not None:
        where = f"overrides file {path}"
    else:
        where = "--overrides" if text is not None else "the default overrides"
    try:
        if path is not None:
            text = path.read_text(encoding="utf-8")
        document = yaml.safe_load(text) if text is not None else None
    except (OSError, yaml.YAMLError) as error:
        raise InvalidInput(f"{where}: {error}") from error
    try:
        overrides = ValidatorWorkloads.model_validate(document or {})
    except pydantic.ValidationError as error:
        raise InvalidInput(f"{where}: {error}") from error
    problems = overrides_problems(overrides)
    if problems:
        raise InvalidInput(f"{where}: {'; '.join(problems)}")
    return overrides, where


def _own_pod(environ: Mapping[str, str]) -> PodOwner | None:
    name, uid = environ.get(POD_NAME_ENV), environ.get(POD_UID_ENV)
    if not name and not uid:
        return None
    if not name or not uid:
        missing = POD_UID_ENV if name else POD_NAME_ENV
        raise InvalidInput(f"{missing} is not set but {POD_NAME_ENV}/{POD_UID_ENV} needs both")
    return PodOwner(name=name, uid=uid)


async def _api_client(kubeconfig: Path | None) -> ApiClient:
    """`new_api_client` for ``kubeconfig`` (None: in-cluster in a pod, else the default
    kubeconfig); a config it cannot load is `InvalidInput`."""
    from kubernetes_asyncio.config import ConfigException

    from gpuctrl.runtime import new_api_client

    try:
        return await new_api_client(kubeconfig)
    except (OSError, ConfigException) as error:
        if kubeconfig is not None:
            raise InvalidInput(f"kubeconfig {kubeconfig}: {error}") from error
        raise InvalidInput(
            f"no in-cluster config nor kubeconfig ({error}); pass --kubeconfig"
        ) from error
