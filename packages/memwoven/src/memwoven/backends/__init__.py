"""Storage backends, one module each. Import them from here or open one by URL with `memwoven.urls`."""
