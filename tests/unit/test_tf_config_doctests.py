"""The examples in tf_config's docstrings are part of its documentation: they must run."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["tf_config", "tf_config._model", "tf_config._generate", "tf_config._render",
           "tf_config._explain", "tf_config._suggest", "tf_config._validate", "tf_config._yaml", "tf_config.ports"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
