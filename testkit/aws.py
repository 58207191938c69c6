"""The fake-AWS environment: fake credentials, a fixed region, no profile or config file, so
nothing a test or a benchmark starts can reach real AWS."""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

from rollout_sdk.local.emulator import FAKE_AWS_ENVIRONMENT, LOCAL_REGION
from rollout_sdk.settings import VARIABLE_PREFIXES

REGION = LOCAL_REGION

#: Set in every environment the kit makes, before any boto3 client exists (the kit's own
#: definition, which its embedded emulator runs in).
FAKE_AWS: Mapping[str, str] = FAKE_AWS_ENVIRONMENT

#: Dropped from every such environment: a profile would point boto3 at real credentials.
UNSET_AWS = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")

#: The kit's own settings; ``clean`` drops the outer shell's.
SETTINGS_PREFIXES = VARIABLE_PREFIXES


def use_fake_aws(environ: MutableMapping[str, str] = os.environ) -> None:
    """Make ``environ`` (this process's, by default) fake-AWS in place."""
    for name in UNSET_AWS:
        environ.pop(name, None)
    environ.update(FAKE_AWS)


def is_fake_aws(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``environ`` is fake-AWS (:func:`use_fake_aws` ran on it): its credentials reach
    no account."""
    return all(environ.get(name) == value for name, value in FAKE_AWS.items())


def fake_aws_env(
    extra: Mapping[str, str] | None = None,
    *,
    base: Mapping[str, str] | None = None,
    clean: bool = False,
) -> dict[str, str]:
    """A child's environment: ``base`` (this process's by default) made fake-AWS, without the
    outer ``OSMOSIS_ROLLOUT_*`` and ``ROLLOUT_SDK_*`` settings when ``clean``, then ``extra``."""
    env = dict(os.environ if base is None else base)
    if clean:
        env = {k: v for k, v in env.items() if not k.upper().startswith(SETTINGS_PREFIXES)}
    use_fake_aws(env)
    env.update(extra or {})
    return env
