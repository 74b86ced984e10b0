"""`loadgen k8s …`: discover variants, run a scenario in the cluster, time cold starts."""

from __future__ import annotations

import argparse
import re
import secrets
import sys
from pathlib import Path
from typing import Any

from loadgen.config.errors import ConfigError
from loadgen.exit_codes import ExitCode

__all__ = ["add_k8s_parser", "cmd_k8s"]

_NAME = re.compile(r"(?=.{1,52}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # a DNS label that leaves room for "-done-token"


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--namespace", "-n", default=None, help="namespace (default: the kubeconfig's or the pod's)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, $KUBECONFIG, ~/.kube)")
    p.add_argument("--context", default=None, help="kubeconfig context")


def add_k8s_parser(sub: Any) -> None:
    k = sub.add_parser("k8s", help="Kubernetes: discover variants, run in a cluster, time cold starts")
    ks = k.add_subparsers(dest="k8s_cmd", required=True)
    d = ks.add_parser("discover", help="list variants by label: Services → base URLs, pods → metrics endpoints")
    _cluster_flags(d)
    d.add_argument("--all-namespaces", "-A", action="store_true", help="look in every namespace")
    d.add_argument("--selector", "-l", default=None, help="only variants matching this label selector")
    d.add_argument("--yaml", action="store_true", help="print a scenario `variants:` block instead of a table")
    r = ks.add_parser("run", help="run a scenario in the cluster (master Job + workers), copy the reports out")
    r.add_argument("file")
    _cluster_flags(r)
    r.add_argument("--workers", type=int, default=1, help="worker pods (default 1)")
    r.add_argument(
        "--image",
        default=None,
        help="loadgen image, REPO[:TAG] or REPO@DIGEST; a bare REPO gets this version's tag (default: the chart's "
        "image.repository and appVersion, the image the release of this version publishes; your own build: "
        "scripts/build-image)",
    )
    r.add_argument(
        "--name",
        default=None,
        help="the run's name, prefix of every object: lowercase letters, digits and '-', at most 52 characters "
        "(default: loadgen-<random>)",
    )
    r.add_argument("--duration", default=None, help="override load.duration (e.g. 2m)")
    r.add_argument("--report-dir", default="loadgen-report", help="where the copied reports go")
    r.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="ENV=SECRET:KEY",
        help="fill environment variable ENV from key KEY of Secret SECRET: one for every variable the scenario reads "
        "a credential from (api_key_env, headers_from_env, metrics.prometheus bearer_token_env / basic_auth_env)",
    )
    r.add_argument("--keep", action="store_true", help="leave the objects in the cluster after the run")
    r.add_argument("--interval", type=float, default=2.0, help=argparse.SUPPRESS)
    c = ks.add_parser("coldstart", help="scale a deployment to 0 and back; time scale → Ready → first token")
    c.add_argument("deployment")
    _cluster_flags(c)
    c.add_argument("--variant", required=True, help="discovered variant whose Service answers for the deployment")
    c.add_argument("--model", default=None, help="model for the probe (default: the variant's model label)")
    c.add_argument("--timeout", default="15m", help="longest wait for each step (default 15m)")
    c.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="send the key in this environment variable as a bearer token (like a scenario's api_key_env); "
        "needs --url: the API server's service proxy consumes the Authorization header",
    )
    c.add_argument(
        "--header-env",
        action="append",
        default=[],
        metavar="HEADER=NAME",
        help="send HEADER with the value of environment variable NAME (like headers_from_env; repeatable)",
    )
    c.add_argument(
        "--url",
        default=None,
        help="probe this server root instead of going through the API server's service proxy: the variant's "
        "base URL from inside the cluster, or an ingress / gateway URL",
    )
    c.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)


def _connect(args: argparse.Namespace) -> Any:
    from loadgen.k8s.api import connect

    return connect(kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace)


def _discover(args: argparse.Namespace) -> int:
    from loadgen.k8s.discover import discover, render_table, render_yaml

    cluster = _connect(args)
    try:
        found = discover(cluster, None if args.all_namespaces else cluster.namespace, args.selector)
    finally:
        cluster.close()
    print(render_yaml(found) if args.yaml else render_table(found), end="" if args.yaml else "\n")
    return 0


def _secrets(specs: list[str]) -> dict[str, dict[str, str]]:
    """--secret ENV=SECRET:KEY flags as the chart's apiKeySecrets value."""
    out = {}
    for spec in specs:
        env, _, ref = spec.partition("=")
        name, _, key = ref.partition(":")
        if not (env and name and key):
            raise ValueError(spec)
        out[env] = {"name": name, "key": key}
    return out


def _scenario_doc(args: argparse.Namespace) -> dict[str, Any]:
    """The scenario the pods run: the file, the environment's settings over it, then --duration (config/precedence.py),
    validated; and refused here, before any object exists, for what the master would refuse at its start that this
    machine can tell (a variant the users leave without one). Raises ``ConfigError``."""
    from loadgen.config.errors import ConfigIssue
    from loadgen.config.overrides import parse_override
    from loadgen.config.precedence import environment_overrides
    from loadgen.config.scenario import read_document
    from loadgen.config.variant_doc import phase_scenarios
    from loadgen.traffic.senders import load_leaves_variants

    flags = [parse_override(f"load.duration={args.duration}", "--duration")] if args.duration else []
    doc = read_document(args.file).with_overrides([*environment_overrides(), *flags])
    sc = doc.validate()
    if sc.load.sequential and len(sc.variants) > 1:
        phase_scenarios(doc.data, sc, args.file)  # the master runs each variant alone: each such scenario valid
    problem = load_leaves_variants(sc)
    if problem:
        raise ConfigError([ConfigIssue("", problem)], args.file)
    return dict(doc.data)


def _run(args: argparse.Namespace) -> int:
    from loadgen.config.scenario import validate_scenario
    from loadgen.k8s.resolve import resolve_doc
    from loadgen.k8s.run import INTERRUPTED, run_in_cluster
    from loadgen.k8s.run_objects import RunSpec, image_ref, rendered
    from loadgen.k8s.scenario_secrets import secret_env_names

    try:
        doc = _scenario_doc(args)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return ExitCode.USAGE
    if args.workers < 1:
        print("loadgen: --workers: at least 1 worker pod", file=sys.stderr)
        return ExitCode.USAGE
    if args.name is not None and not _NAME.fullmatch(args.name):
        print(f"loadgen: --name {args.name!r}: lowercase letters, digits and '-', at most 52", file=sys.stderr)
        return ExitCode.USAGE
    try:
        secret_refs = _secrets(args.secret)
    except ValueError:
        print("loadgen: --secret: expected ENV=SECRET:KEY, e.g. OPENAI_API_KEY=llm-keys:openai", file=sys.stderr)
        return ExitCode.USAGE
    # The pods read every credential variable from a Secret (the chart refuses one without, and so does this).
    keyless = {
        name: field
        for pod in ("workers", "master")
        for field, name in secret_env_names({"scenario": doc}, pod)
        if name not in secret_refs
    }
    if keyless:
        wanted = ", ".join(f"{name} ({field})" for name, field in sorted(keyless.items()))
        print(f"loadgen: {wanted}: give --secret {min(keyless)}=SECRET:KEY", file=sys.stderr)
        return ExitCode.USAGE
    cluster = _connect(args)
    try:
        # Resolved here, once: the pods then need no API access (automountServiceAccountToken: false).
        doc = resolve_doc(cluster, doc)
        try:
            validate_scenario(doc, source=args.file)
        except ConfigError as e:
            print(e, file=sys.stderr)
            return ExitCode.USAGE
        name = args.name or f"loadgen-{secrets.token_hex(3)}"
        # The chart's objects for a headless run (loadgen/k8s/run_objects.py): what `helm install` would make.
        spec = RunSpec(name, doc, workers=args.workers, image=args.image or "", secrets=secret_refs)
        image = image_ref(spec.image, rendered()["chart_image"])
        print(
            f"loadgen: {name} in namespace {cluster.namespace}: {args.workers} worker pod(s) of {image}",
            file=sys.stderr,
        )
        result = run_in_cluster(cluster, spec, Path(args.report_dir), keep=args.keep, interval=args.interval)
    finally:
        cluster.close()
    print(file=sys.stderr)
    if result.code == INTERRUPTED:
        print("loadgen: interrupted; the run's objects were deleted", file=sys.stderr)
    elif result.files:
        print(f"loadgen: {result.status}: {', '.join(str(Path(args.report_dir) / f) for f in result.files)}")
    else:
        print(f"loadgen: {result.status}", file=sys.stderr)
    return result.code


def _coldstart(args: argparse.Namespace) -> int:
    from loadgen.k8s.coldstart import command

    return command(args, _connect)


def _transport_error() -> type[Exception]:
    """urllib3's base error (refused, reset, timed out): what the kubernetes client raises below the HTTP layer."""
    from urllib3.exceptions import HTTPError

    return HTTPError


def cmd_k8s(args: argparse.Namespace) -> int:
    from loadgen.k8s.api import K8sError, api_exception
    from loadgen.k8s.coldstart import ColdStartTimeout

    # The codes (loadgen/exit_codes.py): the API server unreachable or refusing a call is the command failing (4),
    # a deployment that never came up in time the target's breach (1), a bad kubeconfig or flag usage (2).
    try:
        handler = {"discover": _discover, "run": _run, "coldstart": _coldstart}[args.k8s_cmd]
        try:
            return handler(args)
        except api_exception() as e:
            print(f"loadgen: Kubernetes API: {getattr(e, 'status', '')} {getattr(e, 'reason', e)}", file=sys.stderr)
            return ExitCode.RUN_FAILED
        except (OSError, _transport_error()) as e:
            if isinstance(e, OSError) and e.filename is not None:
                raise  # a local file (the report directory): the catch-all names it (loadgen/cli/crash.py)
            print(f"loadgen: cannot reach the Kubernetes API server: {e}", file=sys.stderr)
            return ExitCode.RUN_FAILED
    except ColdStartTimeout as e:
        print(f"loadgen: {e}; replicas restored", file=sys.stderr)
        return ExitCode.SLO_BREACHED
    except K8sError as e:
        print(f"loadgen: {e}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        return 130
