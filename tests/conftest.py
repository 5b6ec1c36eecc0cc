import pytest

from chainkit import Chain, new_chain


@pytest.fixture
def chain() -> Chain:
    return new_chain()
