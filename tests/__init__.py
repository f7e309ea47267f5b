"""nkicc's test suite: one folder per source package (language, ir, simulator, plugins, cache, driver,
bench), end-to-end stories in stories/, shared helpers in support/.
"""
