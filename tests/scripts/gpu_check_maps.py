"""scripts/gpu-check.sh's per-suite maps (`declare -A NAME=( [suite]='value' ... )`), read as bash would (single
quotes, one entry a line), for the tests that check them."""
import os
import re

GPU_CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "gpu-check.sh")


def gpu_check_map(name):
    """gpu-check.sh's associative array `name`, suite -> value; AssertionError when it declares none."""
    with open(GPU_CHECK) as script:
        text = script.read()
    block = re.search(r"declare -A " + name + r"=\((.*?)\n\)", text, re.S)
    if block is None:
        raise AssertionError(f"gpu-check.sh declares no {name}")
    return dict(re.findall(r"^\s*\[(\w+)\]='([^']*)'", block.group(1), re.M))
