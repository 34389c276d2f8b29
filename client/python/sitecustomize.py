"""Start-up hook of the source tree: what the installed package's rankstat-autoload.pth does, for
`PYTHONPATH=client/python` (a .pth file runs only from a site directory).

With RANKSTAT_SGLANG or RANKSTAT_VLLM set it imports rankstat._autoload (docs/sglang.md, docs/vllm.md);
otherwise it imports nothing. Then it runs the sitecustomize this file shadows, if there is one further down
sys.path (Debian's, a virtualenv's), so putting this tree on PYTHONPATH takes nothing away."""

import os
import sys

if os.environ.get("RANKSTAT_SGLANG") or os.environ.get("RANKSTAT_VLLM"):
    try:
        import rankstat._autoload
        rankstat._autoload.run()
    except Exception as e:  # noqa: BLE001 - the program must start whatever happens here
        print(f"rankstat: not installed under the engine ({type(e).__name__}: {e})", file=sys.stderr)


def _run_shadowed_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_run_shadowed_sitecustomize()
