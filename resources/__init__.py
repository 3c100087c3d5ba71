"""Tandem's data files, installed as the package ``app.resources``.

This folder stays at the top of the repository; ``setup.py`` maps it into the
distribution as ``app/resources`` (wheel, sdist and editable install alike), so every
reader finds it the same way: :func:`app.store.paths.resources_dir`, which asks
:mod:`importlib.resources` for this package. It holds icons, the curated catalog,
benchmark prompt sets, the style sheet, desktop-entry and launcher templates, and the
licence notices.
"""
