"""The web wing: both HTTP listeners (the internal API and the public link pages), who may
call them, their pages, and the console. Knows nothing of delivery."""
