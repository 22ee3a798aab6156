"""Documents an admin attaches to the bot, read into sections it can search and cite."""
