"""The Dockerfiles under ``images/`` agree with ``pyproject.toml``, COPY only what the build context
lets in, and ``conductor_core.cluster.images`` gives the references to run them (hadolint and the
torch pin helper, which run as processes: tests/integration/test_images.py).

No image is built here (no registry can be reached, so no base image can be pulled; see
``images/README.md``): these checks are what can be verified without one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from conductor_core.cluster import images
from tests.support.dockerfiles import DOCKERFILES, KINDS, PYPROJECT, ROOT, instructions

# -- reading Dockerfiles ---------------------------------------------------------------------------


def args_defaults(path: Path) -> dict[str, str]:
    """Default values of every ``ARG NAME=value`` (global and per stage)."""
    found: dict[str, str] = {}
    for keyword, args in instructions(path):
        if keyword == "ARG" and "=" in args:
            name, _, value = args.partition("=")
            found.setdefault(name.strip(), value.strip().strip('"'))
    return found


def expand(text: str, values: dict[str, str]) -> str:
    """``${NAME}`` / ``$NAME`` replaced by ARG defaults."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), text)


def from_images(path: Path) -> list[str]:
    """The images of every ``FROM`` (ARG defaults substituted), stage names excluded."""
    values = args_defaults(path)
    stages: set[str] = set()
    out = []
    for keyword, args in instructions(path):
        if keyword == "FROM":
            parts = args.split()
            ref = expand(parts[0], values)
            if ref not in stages:
                out.append(ref)
            if len(parts) == 3 and parts[1].upper() == "AS":
                stages.add(parts[2])
    return out


def pyproject_packages() -> set[str]:
    """Canonical names of every package pyproject.toml declares (core and every extra)."""
    reqs = list(PYPROJECT["project"]["dependencies"])
    for extra in PYPROJECT["project"]["optional-dependencies"].values():
        reqs.extend(extra)
    return {re.sub(r"[-_.]+", "-", Requirement(r).name).lower() for r in reqs}


# -- .dockerignore (Docker's rules: last match wins, a match on a parent directory counts) ------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """``(is_exception, regex)`` per line of the repository's ``.dockerignore``."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        rules.append((negate, _pattern_regex(pattern)))
    return rules


def in_context(rel: str) -> bool:
    """Whether the build context (the repository root) includes the file ``rel``."""
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negate, regex in dockerignore_rules():
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not negate
    return not excluded


# -- versions agree with pyproject.toml -----------------------------------------------------------


def test_every_image_runs_the_python_that_pyproject_declares() -> None:
    versions = {kind: args_defaults(path)["PYTHON_VERSION"] for kind, path in DOCKERFILES.items()}
    assert len(set(versions.values())) == 1, f"images disagree on Python: {versions}"
    version = versions["base"]
    assert version in SpecifierSet(PYPROJECT["project"]["requires-python"])
    major, minor = version.split(".")[:2]
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
    for kind in ("base", "serve"):
        assert set(from_images(DOCKERFILES[kind])) == {f"python:{version}-slim-bookworm"}


def test_dockerfiles_repeat_no_package_pin_of_pyproject() -> None:
    declared = pyproject_packages()
    for kind, path in DOCKERFILES.items():
        for keyword, args in instructions(path):
            if keyword != "RUN" or "pip install" not in args:
                continue
            for token in re.findall(
                r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:==|>=|<=|~=|!=|<(?=\S)|>(?=\S))", args
            ):
                name = re.sub(r"[-_.]+", "-", token).lower()
                assert name not in declared, f"{kind}: {name} is pinned in pyproject.toml"


def test_extras_installed_by_the_images_exist() -> None:
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    expected = {
        "base": {"tasks"},
        "train": {"tasks", "vllm"},
        "serve": {"serve", "providers"},
    }
    for kind, path in DOCKERFILES.items():
        text = " ".join(args for kw, args in instructions(path) if kw == "RUN")
        (installed,) = re.findall(r'pip install [^"]*"\.\[([a-z,]+)\]"', text)
        assert set(installed.split(",")) == expected[kind]
        assert set(installed.split(",")) <= extras
    # one Python layer for every pipeline task: the train image adds only vLLM to it
    tasks = {Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["tasks"]}
    assert {str(r.name) for r in tasks} == {"conductor-core"}
    assert set().union(*(r.extras for r in tasks)) == {"pipelines", "data", "train", "providers"}
    # the serving image stays small: nothing pulls torch into it
    serve_extras = {"serve", "providers"}
    for extra in serve_extras:
        names = {Requirement(r).name for r in PYPROJECT["project"]["optional-dependencies"][extra]}
        assert not names & {"torch", "vllm", "transformers", "conductor-core"}


def test_train_image_cuda_release_matches_the_torch_wheel_index() -> None:
    values = args_defaults(DOCKERFILES["train"])
    major, minor = values["CUDA_VERSION"].split(".")[:2]
    assert values["TORCH_CUDA"] == f"cu{major}{minor}"
    assert expand(values["TORCH_INDEX_URL"], values).endswith(f"/whl/cu{major}{minor}")
    assert f"nvidia/cuda:{values['CUDA_VERSION']}-base-ubuntu24.04" in from_images(
        DOCKERFILES["train"]
    )
    gpu = PYPROJECT["project"]["optional-dependencies"]["gpu"]
    assert gpu == ["conductor-core[train,vllm]"]


def test_base_images_are_pinned_by_tag() -> None:
    for kind, path in DOCKERFILES.items():
        for ref in from_images(path):
            assert "$" not in ref, f"{kind}: unresolved {ref}"
            name, _, tag = ref.rpartition(":")
            assert name and tag and tag != "latest", f"{kind}: {ref} is not pinned"
            assert re.search(r"\d+\.\d+", tag), f"{kind}: {ref} has no version in its tag"


# -- security: non-root, no secrets ---------------------------------------------------------------


def test_images_run_as_a_non_root_user_and_bake_in_no_secret() -> None:
    secretish = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)
    for kind, path in DOCKERFILES.items():
        steps = instructions(path)
        users = [args for kw, args in steps if kw == "USER"]
        assert users, f"{kind}: no USER"
        uid = users[-1].split(":")[0]
        assert uid.isdigit() and int(uid) != 0, f"{kind}: runs as {users[-1]}"
        last_from = max(i for i, (kw, _) in enumerate(steps) if kw == "FROM")
        assert any(kw == "USER" for kw, _ in steps[last_from:]), f"{kind}: final stage is root"
        for kw, args in steps:
            if kw in ("ENV", "ARG"):
                names = re.findall(r"(\w+)=", args) or [args.split()[0]]
                assert not [n for n in names if secretish.search(n)], f"{kind}: {kw} {args}"


# -- build context ---------------------------------------------------------------------------------


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    for kind, path in DOCKERFILES.items():
        copies = [args for kw, args in instructions(path) if kw in ("COPY", "ADD")]
        assert copies
        for args in copies:
            if "--from=" in args:
                continue
            sources = [s for s in args.split() if not s.startswith("--")][:-1]
            for source in sources:
                target = ROOT / source
                assert target.exists(), f"{kind}: COPY {source}: no such path"
                files = (
                    [target] if target.is_file() else [f for f in target.rglob("*") if f.is_file()]
                )
                assert files, f"{kind}: COPY {source}: empty"
                for file in files:
                    rel = file.relative_to(ROOT).as_posix()
                    if "__pycache__" in rel:
                        continue
                    assert in_context(rel), f"{kind}: {rel} is excluded by .dockerignore"


def test_every_package_of_the_project_is_copied_into_every_image() -> None:
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*").split(".")[0] for pattern in include}
    assert "conductor_core" in packages
    for kind, path in DOCKERFILES.items():
        copied = {
            source.rstrip("/")
            for kw, args in instructions(path)
            if kw == "COPY" and "--from=" not in args
            for source in args.split()[:-1]
        }
        assert packages <= copied, f"{kind}: does not COPY {sorted(packages - copied)}"
    for name in ("pyproject.toml", PYPROJECT["project"]["readme"]):
        assert all(
            name in " ".join(a for kw, a in instructions(p) if kw == "COPY")
            for p in DOCKERFILES.values()
        )


def test_dockerignore_keeps_local_state_and_credentials_out() -> None:
    for rel in (".venv/bin/python", ".env", "runs/x/model.safetensors", "tests/conftest.py"):
        assert not in_context(rel), rel
    assert not in_context("conductor_core/__pycache__/x.cpython-311.pyc")
    assert in_context("conductor_core/cluster/images.py")


# -- conductor_core.cluster.images ----------------------------------------------------------------


def test_image_references_default_to_registry_and_package_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import conductor_core

    monkeypatch.delenv(images.REGISTRY_ENV, raising=False)
    monkeypatch.delenv(images.TAG_ENV, raising=False)
    for kind in KINDS:
        assert images.image(kind) == (
            f"{images.DEFAULT_REGISTRY}/conductor-{kind}:{conductor_core.__version__}"
        )
    assert images.KINDS == KINDS
    assert {images.BASE_IMAGE, images.TRAIN_IMAGE, images.SERVE_IMAGE} == {
        images.image("base"),
        images.image("train"),
        images.image("serve"),
    }


def test_image_references_honour_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(images.REGISTRY_ENV, "registry.example.com:5000/ml/")
    monkeypatch.setenv(images.TAG_ENV, "sha-0a1b2c3")
    assert images.image("train") == "registry.example.com:5000/ml/conductor-train:sha-0a1b2c3"
    monkeypatch.setenv(images.TAG_ENV, "")
    assert images.image("serve").endswith(f":{images.default_tag()}")


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("CONDUCTOR_IMAGE_TAG", "bad tag"),
        ("CONDUCTOR_IMAGE_TAG", "-x"),
        ("CONDUCTOR_IMAGE_REGISTRY", "Reg/UPPER"),
    ],
)
def test_invalid_overrides_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=var):
        images.image("base")


def test_unknown_kind_and_local_version_label(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="unknown image kind"):
        images.image("gpu")  # type: ignore[arg-type]
    monkeypatch.delenv(images.TAG_ENV, raising=False)
    monkeypatch.setattr(images, "__version__", "0.2.0+g1234")
    assert images.image("base").endswith("/conductor-base:0.2.0-g1234")


def test_images_module_imports_only_the_standard_library() -> None:
    source = (ROOT / "conductor_core" / "cluster" / "images.py").read_text(encoding="utf-8")
    imported = set(re.findall(r"^(?:from|import) ([\w.]+)", source, re.MULTILINE))
    assert imported == {"__future__", "os", "re", "typing", "conductor_core"}
