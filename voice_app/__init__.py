"""Voice: speech servers the owner already runs (the OpenAI audio API: /v1/audio/transcriptions,
/v1/audio/speech) turn recordings into text and answers into speech, for the page, scripts and
the messengers. No model ships inside Navi; recordings are not kept unless the owner asks."""
