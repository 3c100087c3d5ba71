"""Every widget, window and Qt worker of Tandem (the only package that imports Qt).

Feature folders: :mod:`.chat` (conversation list, messages, input), :mod:`.gauge`
(the live speculation gauge); the window is :mod:`.main_window`, the worker thread
:mod:`.worker`, the entry point :mod:`.launch`.
"""
