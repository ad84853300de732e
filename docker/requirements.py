"""Print the project's requirements, one per line, from pyproject.toml: the build requirements,
the runtime dependencies, and those of the extras named. Run inside the image build (standard
library only), so the dependency layer is keyed on pyproject.toml alone and is reused while only
the code changes.

    python3 docker/requirements.py pyproject.toml [EXTRA ...]
"""

import sys
import tomllib


def requirements(pyproject: dict, extras: list[str]) -> list[str]:
    project = pyproject["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"unknown extras: {', '.join(unknown)}")
    lines = [*pyproject["build-system"]["requires"], *project["dependencies"]]
    for extra in extras:
        lines += optional[extra]
    return lines


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        print("\n".join(requirements(tomllib.load(f), sys.argv[2:])))
