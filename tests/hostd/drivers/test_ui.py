"""The pure UI state machine: invariants under any sequence of input (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from devyard.hostd.drivers import Key, Rotation, TouchAction
from devyard.hostd.drivers.virtual.models import MODELS, ModelProfile
from devyard.hostd.drivers.virtual.render import render
from devyard.hostd.drivers.virtual.ui import LogLines, Screen, UiApp

MODELS_WITH_SCREENS = [m for ms in MODELS.values() for m in ms.values() if m.has_screen]

fraction = st.floats(min_value=0, max_value=1, allow_nan=False)
actions = st.one_of(
    st.tuples(st.just("touch"), st.integers(-2, 3), st.sampled_from(TouchAction), fraction,
              fraction),
    st.tuples(st.just("key"), st.sampled_from(Key)),
    st.tuples(st.just("text"), st.text(max_size=20)),
    st.tuples(st.just("rotate"), st.sampled_from(Rotation)),
    st.tuples(st.just("scroll"), st.integers(-5000, 5000)),
    st.tuples(st.just("launch"), st.integers(0, 10)),
)  # fmt: skip


def step(screen: Screen, action: tuple[object, ...], log: LogLines) -> Screen:
    match action:
        case ("touch", int(pointer), TouchAction() as what, float(x), float(y)):
            width, height = screen.size
            px, py = min(width - 1, int(x * width)), min(height - 1, int(y * height))
            return screen.touch(pointer, what, px, py, log)
        case ("key", Key() as key):
            return screen.key(key, log)
        case ("text", str(text)):
            return screen.type_text(text)
        case ("rotate", Rotation() as rotation):
            return screen.rotate(rotation)
        case ("scroll", int(dy)):
            return screen.scroll(dy)
        case ("launch", int(index)):
            return screen.launch(screen.apps[index % len(screen.apps)].app_id)
    raise AssertionError(action)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(MODELS_WITH_SCREENS), st.lists(actions, max_size=40))
def test_any_input_keeps_the_screen_consistent(
    model: ModelProfile, script: list[tuple[object, ...]]
) -> None:
    apps = tuple(UiApp(a.app_id, a.label) for a in model.system_apps)
    screen = Screen(model, apps=apps)
    log: LogLines = []
    for action in script:
        screen = step(screen, action, log)
        ids = {a.app_id for a in screen.apps}
        assert screen.foreground is None or screen.foreground in screen.running
        assert set(screen.running) <= ids and len(set(screen.running)) == len(screen.running)
        assert len({m.pointer_id for m in screen.marks}) == len(screen.marks)
        width, height = screen.size
        assert all(0 <= m.x < width and 0 <= m.y < height for m in screen.marks)
        if screen.foreground is not None:
            assert 0 <= screen.scroll_of(screen.foreground) <= screen.max_scroll()
    image = render(screen)  # any reachable state draws
    assert image.size == screen.size
