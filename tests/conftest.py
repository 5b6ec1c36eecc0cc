import pytest

from tests.kits.chainkit import Chain, new_chain


@pytest.fixture
def chain() -> Chain:
    return new_chain()
