"""`inspector space build DIR` and `inspector space deploy REPO_ID`: the hosted demo on Hugging Face Spaces.

build:  write the Space folder (package, app.py, static/, Space README + requirements) to DIR.
deploy: build into a temporary folder (or take --dir), create the Space if needed, upload, print its URL.
"""

from __future__ import annotations

import argparse
import tempfile

from inspector.errors import InputError
from inspector.space.bundle import build_bundle


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("space", help="build or deploy the Hugging Face Space (hosted demo)",
                                   description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="space_command", required=True)

    build = actions.add_parser("build", help="write the deployable Space folder to DIR")
    build.add_argument("dir", metavar="DIR", help="destination folder (absent or empty)")
    build.add_argument("--overwrite", action="store_true", help="delete DIR first if it is not empty")
    build.set_defaults(func=build_main)

    deploy = actions.add_parser("deploy", help="create/update the Space REPO_ID and upload the app")
    deploy.add_argument("repo_id", metavar="REPO_ID", help="the Space, as owner/name")
    deploy.add_argument("--token", default=None, help="Hub token with write access (default: HF_TOKEN or "
                                                     "the stored `hf auth login` token)")
    deploy.add_argument("--private", action="store_true", help="create the Space as private")
    deploy.add_argument("--dir", default=None, help="upload this already-built folder instead of building one")
    deploy.set_defaults(func=deploy_main)


def build_main(args: argparse.Namespace) -> int:
    if not args.dir.strip():  # "" would mean the current folder, and --overwrite would empty it
        raise InputError("DIR is empty: name the folder to write the Space into")
    files = build_bundle(args.dir, overwrite=args.overwrite)
    print(f"built the Space bundle in {args.dir} ({len(files)} files); "
          f"deploy it with: inspector space deploy OWNER/NAME --dir {args.dir}")
    return 0


def deploy_main(args: argparse.Namespace) -> int:
    from inspector.space.deploy import check_repo_id, deploy_space, resolve_token

    check_repo_id(args.repo_id)  # fail fast, before building anything
    token = resolve_token(args.token)
    if args.dir is not None:
        url = deploy_space(args.dir, args.repo_id, token=token, private=args.private)
    else:
        with tempfile.TemporaryDirectory(prefix="inspector-space-") as tmp:
            build_bundle(tmp)
            url = deploy_space(tmp, args.repo_id, token=token, private=args.private)
    print(url)
    return 0
