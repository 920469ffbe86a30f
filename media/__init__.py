"""Photos and voice messages (DESIGN §5.1): image files kept with their session, and what a turn makes of them."""
