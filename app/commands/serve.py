"""`parley serve`: the web page and WebRTC endpoint (what `make run` starts)."""
import errno
import ipaddress
import logging
import socket
import sys
from pathlib import Path

from app.commands.common import UsageError, add_model_flags, settings_from, study

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve the talk page and WebRTC endpoint (default http://127.0.0.1:8000)")
    p.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="TCP port (default 8000)")
    p.add_argument("--ssl-certfile", metavar="PEM",
                   help="TLS certificate: browsers only give the microphone to https pages off localhost")
    p.add_argument("--ssl-keyfile", metavar="PEM", help="TLS private key for --ssl-certfile")
    add_model_flags(p)
    p.set_defaults(func=run)


def run(args) -> int:
    settings = settings_from(args, host=args.host, port=args.port,
                             ssl_certfile=args.ssl_certfile, ssl_keyfile=args.ssl_keyfile)
    if bool(settings.ssl_certfile) != bool(settings.ssl_keyfile):
        print("parley serve: --ssl-certfile and --ssl-keyfile go together; give both or neither", file=sys.stderr)
        return 2
    for flag, path in (("--ssl-certfile", settings.ssl_certfile), ("--ssl-keyfile", settings.ssl_keyfile)):
        if path and not Path(path).is_file():
            print(f"parley serve: {flag} {path}: no such file", file=sys.stderr)
            return 2
    if not 0 < settings.port < 65536:
        print(f"parley serve: --port must be 1-65535, got {settings.port}", file=sys.stderr)
        return 2
    _check_can_listen(settings.host, settings.port)   # a port in use shows now, not after the models load
    if not settings.ssl_certfile and not _is_loopback(settings.host):
        log.warning("serving plain http on %s: browsers on other machines will refuse the microphone; "
                    "pass --ssl-certfile and --ssl-keyfile", settings.host)
    import uvicorn

    from app.pipeline.services import Services
    from app.server.app import create_app

    # Loaded here rather than in the app's lifespan so a bad model path is one clear line, not a traceback.
    try:
        services = Services.load(settings)
    except (ValueError, OSError) as exc:
        print(f"parley serve: {exc}", file=sys.stderr)
        return 2
    study(services)
    scheme = "https" if settings.ssl_certfile else "http"
    log.info("Parley on %s://%s:%d (models warm up before the first request)", scheme, settings.host, settings.port)
    try:
        uvicorn.run(create_app(settings, services), host=settings.host, port=settings.port,
                    ssl_certfile=settings.ssl_certfile, ssl_keyfile=settings.ssl_keyfile, log_level="info")
    finally:
        services.shutdown()
    return 0


def _check_can_listen(host: str, port: int) -> None:
    """Bind (host, port) as uvicorn will (SO_REUSEADDR), then let it go; raises UsageError if that fails."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        why = "already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise UsageError(f"cannot listen on {host}:{port}: {why}") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
