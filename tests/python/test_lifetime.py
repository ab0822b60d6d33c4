"""Compiled functions and modules are freed: nothing kiln keeps (cached
entries, KBC translations, module wrappers) holds the user's objects alive
once the user drops them and calls kiln.reset()."""
import gc
import weakref

import kiln
from kiln import nn


def test_compiled_function_and_its_inputs_are_freed():
    def f(x):
        return kiln.exp(x) + 1

    g = kiln.compile(f)
    x = kiln.ones(3)
    g(x)
    refs = [weakref.ref(f), weakref.ref(g)]
    del f, g, x
    kiln.reset()
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_compiled_module_is_freed():
    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return kiln.relu(self.fc(x))

    m = Small()
    c = kiln.compile(m)
    c(kiln.ones(2, 4))
    refs = [weakref.ref(m), weakref.ref(c)]
    del m, c
    kiln.reset()
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_module_with_a_reference_cycle_is_collected():
    class Node(nn.Module):
        def forward(self, x):
            return x

    a = Node()
    a.me = [a]  # the C++ module holds no Python reference: the wrapper is collected
    r = weakref.ref(a)
    del a
    gc.collect()
    assert r() is None
