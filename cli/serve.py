"""``dmsgw serve``: the gateway as interLink's plugin (sidecar), until SIGTERM or Ctrl-C.

It reads the configuration (:mod:`dmsgw.interlink.configuration.serve_config`: flags, ``$DMSGW_*``,
a YAML file), sets up the JSON-lines log on stderr, and runs :class:`~dmsgw.interlink.server.Serve`
over the gateway that :func:`dmsgw.interlink.app.start_backend` assembles.
Where it listens goes to stdout, one line each, as soon as both servers accept connections;
``dmsgw serve: stopped`` follows a clean shutdown.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Awaitable
from typing import Any, TextIO

from ..interlink.configuration.serve_config import CONFIG_ENV, SETTINGS, GatewayConfig, load_config
from ..interlink.gateway_log import configure_logging
from ..interlink.server import BackendFactory, Metrics, PluginBackend, Serve, ServeInfo
from . import summary

log = logging.getLogger("dmsgw.serve")


def serve(config: GatewayConfig, factory: BackendFactory, *, out: TextIO | None = None) -> int:
    """Runs the gateway with the backend ``factory`` makes until SIGTERM/SIGINT."""
    stdout = out if out is not None else sys.stdout
    options = config.server_options()  # refused here, before anything starts or logs
    configure_logging(config.log_level, config.log_format, secrets=config.secret_values())
    log.info("configuration", extra={"config": config.describe()})
    runner = Serve(factory, options)
    asyncio.run(runner.run(started=lambda info: _announce(info, config, stdout)))
    print("dmsgw serve: stopped", file=stdout, flush=True)
    return 0


def _announce(info: ServeInfo, config: GatewayConfig, out: TextIO) -> None:
    plugin = info.plugin
    if plugin.path is None:
        hint = f'interLink: SidecarURL "http://{plugin.host}", SidecarPort "{plugin.port}"'
    else:
        hint = f'interLink: SidecarURL "{plugin.url}"'
    lines = [
        f"dmsgw serve: listening on {plugin.url} ({hint})",
        f"dmsgw serve: DMS {config.dms_url or 'embedded devnet'}",
        f"dmsgw serve: health  {info.healthz}",
        f"dmsgw serve: metrics {info.metrics}",
        "dmsgw serve: SIGTERM or Ctrl-C stops it",
    ]
    print("\n".join(lines), file=out, flush=True)


def _run(args: argparse.Namespace) -> int:
    flags: dict[str, Any] = {setting.key: getattr(args, setting.key) for setting in SETTINGS}
    config = load_config(config_file=args.config, flags=flags)
    # Imported here, not above: `dmsgw serve --help` and a configuration refused need none of
    # the gateway, its DMS client or the devnet, whose imports are most of a command's start
    # (bench/README.md, "A command's start").
    from ..interlink.app import start_backend

    def factory(metrics: Metrics) -> Awaitable[PluginBackend]:
        return start_backend(config, metrics=metrics)

    return serve(config, factory)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help=summary("serve"),
        description=(
            "Run the NuNet plugin for interLink until SIGTERM or Ctrl-C, against the DMS at "
            "--dms-url or, with --devnet, the embedded devnet on this host (one of the two is "
            "required). Each option can also be set by the environment variable in brackets, "
            "or in the YAML --config file by the variable's name without DMSGW_, in lower case "
            "(pods_capacity: 500); flags win over the environment, which wins over the file. "
            "Secrets come only from the environment or files: $DMS_PASSPHRASE unlocks the key, "
            "$DMSGW_TOKEN (or --token-file) is the bearer token the plugin API then requires "
            "on TCP (never on a unix socket), $DMSGW_OPERATOR_TOKEN (or --operator-token-file) "
            "the operator port's; a non-loopback --listen or --operator-listen needs its "
            "token. Requests from web pages (Origin), for another host name (Host) or with a "
            "body that is not application/json are refused. Every key: docs/configuration.md."
        ),
    )
    parser.add_argument("--config", metavar="FILE", help=f"YAML configuration file [${CONFIG_ENV}]")
    for setting in SETTINGS:
        if setting.switch:
            parser.add_argument(
                setting.flag,
                dest=setting.key,
                action="store_const",
                const=True,
                help=f"{setting.help} [${setting.env}=1]",
            )
            continue
        parser.add_argument(
            setting.flag,
            dest=setting.key,
            metavar=setting.metavar,
            help=f"{setting.help} [${setting.env}]",
        )
    parser.set_defaults(handler=_run)
